//! Congestion control's shared state, the congestion-control component: the traffic
//! classes, the NICs' own DCQCN knobs, each algorithm's interned parameter sets (QPs hold
//! an index) and HPCC's INT records. Its fields are its own: the engine asks it for a
//! QP's parameters, a parameter set by index, or the INT slab.
//!
//! ```compile_fail
//! // A handler cannot swap a class's parameters behind the component's back.
//! fn swap(c: &mut xirang_sim::engine::ccstate::CcState) {
//!     c.classes.clear();
//! }
//! ```

use xirang_fabric::config::{CcAlgorithm, NicCongestion};
use xirang_fabric::model::{BaseRtt, NicId};

use super::ClassRt;
use super::flows::CcParams;
use super::nic::Cc;
use crate::cc::{Dcqcn, DcqcnState, Dctcp, DctcpState, Hpcc, HpccState, Timely, TimelyState};
use crate::time::Ps;

/// Index of `x` in `v`, appending it if absent: QPs share parameter sets by index.
fn intern<T: PartialEq>(v: &mut Vec<T>, x: T) -> u16 {
    let i = v.iter().position(|y| *y == x).unwrap_or_else(|| {
        v.push(x);
        v.len() - 1
    });
    u16::try_from(i).expect("invariant: fewer than 65536 distinct parameter sets")
}

/// INT records of the HPCC packets in flight, by index (`Packet::int_index`): a record is
/// taken when an HPCC QP sends a data packet, written by every switch the packet leaves,
/// handed to the ACK by the receiver, and returned when the ACK reaches the sender or the
/// packet is lost. Capacity follows the packets in flight, reused afterwards.
#[derive(Debug, Default)]
pub struct IntSlab {
    records: Vec<crate::cc::int::Record>,
    free: Vec<u32>,
    live: usize,
}

impl IntSlab {
    /// Record `i`.
    #[inline(always)]
    pub(crate) fn record(&self, i: u32) -> crate::cc::int::Record {
        self.records[i as usize]
    }

    /// Record `i`, to write (a switch adds its hop).
    #[inline(always)]
    pub(crate) fn record_mut(&mut self, i: u32) -> &mut crate::cc::int::Record {
        &mut self.records[i as usize]
    }

    /// Stores a record that came with a packet from another partition.
    pub(crate) fn put(&mut self, rec: crate::cc::int::Record) -> u32 {
        let i = self.take(rec.multi);
        self.records[i as usize] = rec;
        i
    }

    /// Records taken and not given back.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Counts the records another partition held at its end (a merge).
    pub(crate) fn absorb_live(&mut self, n: usize) {
        self.live += n;
    }

    pub(crate) fn take(&mut self, multi: u8) -> u32 {
        self.live += 1;
        let rec = crate::cc::int::Record {
            multi,
            ..Default::default()
        };
        match self.free.pop() {
            Some(i) => {
                self.records[i as usize] = rec;
                i
            }
            None => {
                self.records.push(rec);
                u32::try_from(self.records.len() - 1)
                    .expect("invariant: fewer than 2^32 INT records in flight")
            }
        }
    }

    pub(crate) fn give_back(&mut self, i: u32) {
        self.live -= 1;
        self.free.push(i);
    }
}

/// Congestion control's state shared by QPs.
#[derive(Debug)]
pub struct CcState {
    classes: Vec<ClassRt>,
    /// The NICs with their own DCQCN knobs (`Nic::congestion`), by NIC index, sorted:
    /// few or none, so a fabric of many NICs pays nothing for them.
    nic_congestion: Vec<(u32, NicCongestion)>,
    dcqcn: Vec<Dcqcn>,
    timely: Vec<Timely>,
    hpcc: Vec<Hpcc>,
    dctcp: Vec<Dctcp>,
    /// The fabric's largest base RTT and BDP (HPCC's T and the window of HPCC and DCTCP
    /// QPs); computed only when a class runs one of them.
    base_rtt: Option<BaseRtt>,
    ints: IntSlab,
}

impl CcState {
    /// The run's classes, the NICs' own knobs (sorted by NIC index) and the base RTT.
    pub(crate) fn new(
        classes: Vec<ClassRt>,
        nic_congestion: Vec<(u32, NicCongestion)>,
        base_rtt: Option<BaseRtt>,
    ) -> CcState {
        CcState {
            classes,
            nic_congestion,
            dcqcn: Vec::new(),
            timely: Vec::new(),
            hpcc: Vec::new(),
            dctcp: Vec::new(),
            base_rtt,
            ints: IntSlab::default(),
        }
    }

    /// The traffic class `name` (validated at load).
    pub(crate) fn class(&self, name: &str) -> &ClassRt {
        self.classes
            .iter()
            .find(|c| c.name == name)
            .expect("invariant: classes are validated at load")
    }

    /// The longest DCQCN rate-increase period (`rpg_time_reset`) any class or NIC of
    /// the run has, µs (0 when none runs DCQCN).
    pub(crate) fn longest_dcqcn_period_us(&self) -> f64 {
        let classes = self
            .classes
            .iter()
            .filter(|c| c.cc == CcAlgorithm::Dcqcn)
            .map(|c| c.dcqcn.rpg_time_reset_us);
        let nics = self.nic_congestion.iter().map(|(_, n)| n.dcqcn.rpg_time_reset_us);
        classes.chain(nics).fold(0.0, f64::max)
    }

    /// The DCQCN knobs of NIC `nic` when it has its own.
    fn nic_congestion(&self, nic: NicId) -> Option<&NicCongestion> {
        self.nic_congestion
            .binary_search_by_key(&nic.0, |(i, _)| *i)
            .ok()
            .map(|k| &self.nic_congestion[k].1)
    }

    /// A QP's congestion control from its class, priority, ends (sender, receiver) and
    /// line rate: the parameter set it runs, the interval of the CNPs its receiver sends
    /// (None: no CNPs), and its window (0: paced only).
    pub(crate) fn qp_params(
        &mut self,
        class: &ClassRt,
        prio: u8,
        ends: (NicId, NicId),
        line_bps: f64,
    ) -> (CcParams, Option<Ps>, u64) {
        let firmware_cc = matches!(class.cc, CcAlgorithm::Dcqcn | CcAlgorithm::None);
        let (cc, cnp_interval) = match class.cc {
            // A NIC with its own knobs decides as mlx5 firmware does: the sender's
            // `roce_rp/enable/P` whether the QP runs DCQCN (with the sender's parameters),
            // the receiver's `roce_np/enable/P` whether marks are answered with CNPs (at
            // the receiver's `min_time_between_cnps`).
            _ if firmware_cc && !self.nic_congestion.is_empty() => {
                let class_dcqcn = (class.cc == CcAlgorithm::Dcqcn).then_some(class.dcqcn);
                let rp = match self.nic_congestion(ends.0) {
                    Some(c) => c.rp_priorities.contains(&prio).then_some(c.dcqcn),
                    None => class_dcqcn,
                };
                let np = match self.nic_congestion(ends.1) {
                    Some(c) => c.np_priorities.contains(&prio).then_some(c.dcqcn),
                    None => class_dcqcn,
                };
                let cc = match rp {
                    Some(p) => CcParams::Dcqcn(intern(&mut self.dcqcn, Dcqcn::new(&p, line_bps))),
                    None => CcParams::None,
                };
                (cc, np.map(|p| Dcqcn::new(&p, line_bps).cnp_interval))
            }
            CcAlgorithm::None => (CcParams::None, None),
            CcAlgorithm::Dcqcn => {
                let idx = intern(&mut self.dcqcn, Dcqcn::new(&class.dcqcn, line_bps));
                (CcParams::Dcqcn(idx), Some(self.dcqcn[idx as usize].cnp_interval))
            }
            CcAlgorithm::Timely => {
                let idx = intern(&mut self.timely, Timely::new(&class.timely, line_bps));
                (CcParams::Timely(idx), None)
            }
            CcAlgorithm::Hpcc => {
                let b = self.base_rtt.expect("computed when a class runs HPCC");
                let idx = intern(
                    &mut self.hpcc,
                    Hpcc::new(&class.hpcc, line_bps, b.max_rtt_ns, b.max_bdp_bytes),
                );
                (CcParams::Hpcc(idx), None)
            }
            CcAlgorithm::Dctcp => {
                let b = self.base_rtt.expect("computed when a class runs DCTCP");
                let idx = intern(
                    &mut self.dctcp,
                    Dctcp::new(&class.dctcp, line_bps, b.max_bdp_bytes),
                );
                (CcParams::Dctcp(idx), None)
            }
        };
        // HPCC and DCTCP QPs are window-limited as the HPCC simulator runs them (HAS_WIN
        // and VAR_WIN in its run.py); DCQCN and TIMELY are paced only.
        let win_bytes = match cc {
            CcParams::Hpcc(i) => self.hpcc[i as usize].win_bytes,
            CcParams::Dctcp(i) => self.dctcp[i as usize].win_bytes,
            _ => 0,
        };
        (cc, cnp_interval, win_bytes)
    }

    /// A new QP's congestion-control state for parameter set `p`.
    pub(crate) fn start(&self, p: CcParams) -> Cc {
        match p {
            CcParams::None => Cc::None,
            CcParams::Dcqcn(i) => Cc::Dcqcn(i, Box::new(DcqcnState::new(self.dcqcn(i)))),
            CcParams::Timely(i) => Cc::Timely(i, Box::new(TimelyState::new(self.timely(i)))),
            CcParams::Hpcc(i) => Cc::Hpcc(i, Box::new(HpccState::new(self.hpcc(i)))),
            CcParams::Dctcp(i) => Cc::Dctcp(i, Box::new(DctcpState::new(self.dctcp(i)))),
        }
    }

    /// DCQCN parameter set `i`.
    #[inline(always)]
    pub(crate) fn dcqcn(&self, i: u16) -> &Dcqcn {
        &self.dcqcn[usize::from(i)]
    }

    /// TIMELY parameter set `i`.
    #[inline(always)]
    pub(crate) fn timely(&self, i: u16) -> &Timely {
        &self.timely[usize::from(i)]
    }

    /// HPCC parameter set `i`.
    #[inline(always)]
    pub(crate) fn hpcc(&self, i: u16) -> &Hpcc {
        &self.hpcc[usize::from(i)]
    }

    /// DCTCP parameter set `i`.
    #[inline(always)]
    pub(crate) fn dctcp(&self, i: u16) -> &Dctcp {
        &self.dctcp[usize::from(i)]
    }

    /// HPCC's INT records.
    #[inline(always)]
    pub(crate) fn ints(&self) -> &IntSlab {
        &self.ints
    }

    /// HPCC's INT records, to take, write or give back.
    #[inline(always)]
    pub(crate) fn ints_mut(&mut self) -> &mut IntSlab {
        &mut self.ints
    }
}
