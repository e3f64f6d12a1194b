//! `xirang memreg plan`: how large a region each NIC's pool must register for a
//! workload, and how much memory that pins (MISSION 3.1: large enough for peak traffic,
//! no larger).
//!
//! Each end of a connection holds, per size class, one buffer per work request its QPs
//! can have posted: `QPs x WR depth` buffers of the class that the connection's messages
//! round up to (a power of two from the cache line, capped at the largest buffer: a
//! larger message is posted in buffer-sized pieces). No connection needs more buffers
//! than its whole traffic fills, so that bounds the count from above. Classes are laid out
//! as the pool lays them out (strides, whole pages per class); headroom is added and the
//! region rounded up to the pinning page. The result is an upper bound: it assumes every
//! connection's queues are full at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::MemregError;
use crate::pool::stride_of;

/// One end of one connection (a communicator's link between two NICs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionEnd {
    /// The NIC (its pool registers with it).
    pub nic: String,
    /// Its host.
    pub host: String,
    /// The connection's largest message, bytes.
    pub max_message_bytes: u64,
    /// All bytes the connection carries (bounds the buffers it can use).
    pub total_bytes: u64,
    /// QPs of the connection.
    pub qps: u32,
}

/// The sizing rules.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanParams {
    /// Send queue depth per QP (`transport.wr_depth`).
    pub wr_depth: u32,
    /// Largest buffer (`memory.buffer_bytes`): larger messages go in pieces of this size.
    pub max_buffer_bytes: u64,
    /// Buffer alignment below a page (`memory.cache_line_bytes`).
    pub cache_line_bytes: u64,
    /// Base page: buffers of a page or more start on one
    /// (docs/reference/memory-registration.md §5).
    pub base_page_bytes: u64,
    /// Page backing the region (`memory.page_bytes`): what pinning rounds to.
    pub pin_page_bytes: u64,
    /// Extra fraction on top of the computed need.
    pub headroom: f64,
}

/// One size class of one NIC's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassNeed {
    /// Buffer size, bytes.
    pub size_bytes: u64,
    /// QPs (connection ends x QPs each) whose messages fall in it.
    pub qps: u64,
    /// Buffers.
    pub buffers: u64,
    /// Bytes the class occupies in the region (strides, whole pages).
    pub bytes: u64,
}

/// One NIC's pool.
#[derive(Debug, Clone, PartialEq)]
pub struct NicPlan {
    /// NIC.
    pub nic: String,
    /// Host.
    pub host: String,
    /// Size classes, smallest first.
    pub classes: Vec<ClassNeed>,
    /// Bytes the classes need.
    pub need_bytes: u64,
    /// Region to register: the need plus headroom, rounded up to the pinning page.
    pub region_bytes: u64,
}

/// The plan for every NIC that carries traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Per NIC, by name.
    pub nics: Vec<NicPlan>,
    /// Pinned bytes per host (its NICs' regions), by host name.
    pub hosts: BTreeMap<String, u64>,
}

impl Plan {
    /// The NIC with the largest region.
    pub fn busiest(&self) -> Option<&NicPlan> {
        self.nics.iter().max_by_key(|n| n.region_bytes)
    }

    /// All regions, bytes: what the fleet pins.
    pub fn total_pinned_bytes(&self) -> u64 {
        self.hosts.values().sum()
    }
}

/// Transfers grouped into connections: one per workload and NIC pair (a communicator's
/// QPs), with its largest message, all it carries and its QPs.
#[derive(Debug, Clone, Default)]
pub struct Connections {
    /// (workload, sending NIC, receiving NIC) -> (largest message, total bytes, QPs).
    by_pair: BTreeMap<(u16, u32, u32), (u64, u64, u32)>,
}

impl Connections {
    /// Counts one transfer of `bytes`, made `repeat` times, on the connection from NIC
    /// `src` to NIC `dst` of `workload`.
    pub fn add(&mut self, workload: u16, src: u32, dst: u32, bytes: u64, repeat: u64, qps: u32) {
        let c = self.by_pair.entry((workload, src, dst)).or_default();
        c.0 = c.0.max(bytes);
        c.1 = c.1.saturating_add(bytes.saturating_mul(repeat));
        c.2 = qps;
    }

    /// Connections counted.
    pub fn len(&self) -> usize {
        self.by_pair.len()
    }

    /// No connection was counted.
    pub fn is_empty(&self) -> bool {
        self.by_pair.is_empty()
    }

    /// Both ends of every connection; `name` gives a NIC's (name, host).
    pub fn ends(&self, name: impl Fn(u32) -> (String, String)) -> Vec<ConnectionEnd> {
        let mut ends = Vec::with_capacity(2 * self.by_pair.len());
        for (&(_, src, dst), &(max, total, qps)) in &self.by_pair {
            for id in [src, dst] {
                let (nic, host) = name(id);
                ends.push(ConnectionEnd {
                    nic,
                    host,
                    max_message_bytes: max,
                    total_bytes: total,
                    qps,
                });
            }
        }
        ends
    }
}

/// A configured region against what the busiest NIC needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Below the need: queues can run out of buffers.
    TooSmall,
    /// More than [`OVERSIZED_FACTOR`] times the need: memory pinned for nothing.
    Oversized,
    /// Large enough, no larger (MISSION 3.1).
    Enough,
}

/// A region this many times its need misses "no larger" by a wide margin (MISSION 3.1);
/// our threshold.
pub const OVERSIZED_FACTOR: u64 = 2;

impl Verdict {
    /// `configured` region bytes against the `need` of the busiest NIC.
    pub fn of(configured: u64, need: u64) -> Verdict {
        if need > configured {
            Verdict::TooSmall
        } else if configured > OVERSIZED_FACTOR.saturating_mul(need.max(1)) {
            Verdict::Oversized
        } else {
            Verdict::Enough
        }
    }

    /// As printed.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::TooSmall => "too small",
            Verdict::Oversized => "oversized",
            Verdict::Enough => "enough",
        }
    }
}

/// Maps and registers `n`'s planned pool on this machine through the automatic backend
/// (libibverbs where a device is present, else pinned host memory): the registered
/// bytes and the backend's reason, or why it failed.
pub fn register_here(n: &NicPlan, p: &PlanParams, device: Option<&str>) -> Result<(u64, String), String> {
    let huge = crate::region::HUGE_PAGE_BYTES as u64;
    let page = crate::region::page_size() as u64;
    if p.pin_page_bytes != page && p.pin_page_bytes != huge {
        return Err(format!(
            "--register maps this machine's {page}-byte pages or {huge}-byte huge pages; memory.page_bytes is {}",
            p.pin_page_bytes
        ));
    }
    // A device the user named must be the one registered with: falling back to pinned
    // host memory would report a registration that never touched it.
    let (backend, why) = match device {
        Some(name) => match crate::verbs::Device::open(Some(name)) {
            Ok(d) => {
                let msg = format!("verbs backend on {}", d.name());
                (
                    Arc::new(crate::verbs::VerbsBackend::new(d)) as Arc<dyn crate::region::Backend>,
                    msg,
                )
            }
            Err(e) => return Err(format!("--device {name}: {e}")),
        },
        None => crate::verbs::auto_backend(None),
    };
    let classes = n
        .classes
        .iter()
        .map(|c| crate::ClassSpec {
            size_bytes: c.size_bytes as usize,
            // The planned region's headroom, as buffers of each class.
            count: (c.buffers as f64 * (1.0 + p.headroom)).ceil() as usize,
        })
        .collect();
    let mut cfg = crate::PoolConfig::new(classes);
    cfg.alignment_bytes = p.cache_line_bytes as usize;
    cfg.huge_pages = p.pin_page_bytes == huge;
    match crate::Pool::new(cfg, backend) {
        Ok(pool) => Ok((pool.registered_bytes() as u64, why)),
        Err(e) => Err(format!("{e} ({why})")),
    }
}

/// Per class size: (QPs, buffers).
type ClassTotals = BTreeMap<u64, (u64, u64)>;

/// The class a message of `bytes` uses.
pub fn class_size(bytes: u64, p: &PlanParams) -> u64 {
    bytes
        .max(p.cache_line_bytes)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
        .min(p.max_buffer_bytes)
}

/// Largest headroom: ten times the need on top of it. A region that much larger than its
/// traffic defeats the "large enough, no larger" rule the plan exists for.
pub const MAX_HEADROOM: f64 = 10.0;

/// Plans every NIC's pool from the connections' ends.
pub fn plan(ends: &[ConnectionEnd], p: &PlanParams) -> Result<Plan, MemregError> {
    if p.wr_depth == 0 || p.max_buffer_bytes == 0 || p.cache_line_bytes == 0 {
        return Err(MemregError::Config(
            "expected wr_depth, buffer size and cache line above 0".into(),
        ));
    }
    if !p.base_page_bytes.is_power_of_two() || !p.pin_page_bytes.is_power_of_two() {
        return Err(MemregError::Config(format!(
            "expected page sizes that are powers of two, found {} and {}",
            p.base_page_bytes, p.pin_page_bytes
        )));
    }
    if !(p.headroom.is_finite() && (0.0..=MAX_HEADROOM).contains(&p.headroom)) {
        return Err(MemregError::Config(format!(
            "expected a headroom of 0..={MAX_HEADROOM} (0 to {}% on top of the need), found {:?}",
            MAX_HEADROOM * 100.0,
            p.headroom
        )));
    }
    let mut per_nic: BTreeMap<&str, (&str, ClassTotals)> = BTreeMap::new();
    for e in ends {
        let size = class_size(e.max_message_bytes, p);
        let full_queues = u64::from(e.qps.max(1)) * u64::from(p.wr_depth);
        let traffic = e.total_bytes.div_ceil(size).max(1);
        let entry = per_nic
            .entry(&e.nic)
            .or_insert_with(|| (&e.host, BTreeMap::new()));
        let c = entry.1.entry(size).or_default();
        c.0 += u64::from(e.qps.max(1));
        c.1 += full_queues.min(traffic);
    }
    let mut nics = Vec::new();
    let mut hosts: BTreeMap<String, u64> = BTreeMap::new();
    for (nic, (host, classes)) in per_nic {
        let mut out = Vec::new();
        let mut need = 0u64;
        for (size, (qps, buffers)) in classes {
            let stride = stride_of(
                size as usize,
                p.cache_line_bytes.min(p.base_page_bytes) as usize,
                p.base_page_bytes as usize,
            ) as u64;
            let bytes = stride
                .saturating_mul(buffers)
                .div_ceil(p.base_page_bytes)
                .saturating_mul(p.base_page_bytes);
            need = need.saturating_add(bytes);
            out.push(ClassNeed {
                size_bytes: size,
                qps,
                buffers,
                bytes,
            });
        }
        // Saturating throughout: an impossible plan must read as huge, never wrap to small.
        let with_headroom = (need as f64 * (1.0 + p.headroom)).ceil() as u64;
        let region = with_headroom
            .div_ceil(p.pin_page_bytes)
            .saturating_mul(p.pin_page_bytes);
        let h = hosts.entry(host.to_string()).or_default();
        *h = h.saturating_add(region);
        nics.push(NicPlan {
            nic: nic.to_string(),
            host: host.to_string(),
            classes: out,
            need_bytes: need,
            region_bytes: region,
        });
    }
    Ok(Plan { nics, hosts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> PlanParams {
        PlanParams {
            wr_depth: 4,
            max_buffer_bytes: 1 << 20,
            cache_line_bytes: 64,
            base_page_bytes: 4096,
            pin_page_bytes: 4096,
            headroom: 0.0,
        }
    }

    fn end(nic: &str, msg: u64, total: u64, qps: u32) -> ConnectionEnd {
        ConnectionEnd {
            nic: nic.into(),
            host: format!("h-{nic}"),
            max_message_bytes: msg,
            total_bytes: total,
            qps,
        }
    }

    #[test]
    fn classes_round_up_to_powers_of_two_capped_at_the_largest_buffer() {
        let p = params();
        assert_eq!(class_size(1, &p), 64);
        assert_eq!(class_size(3000, &p), 4096);
        assert_eq!(class_size(4096, &p), 4096);
        assert_eq!(class_size(5 << 20, &p), 1 << 20);
    }

    #[test]
    fn full_queues_bound_the_buffers_and_traffic_bounds_them_too() {
        let p = params();
        // 2 QPs x depth 4 = 8 buffers of 64 KiB when the traffic fills them.
        let plan = plan(&[end("a", 64 << 10, 100 << 20, 2)], &p).unwrap();
        let c = &plan.nics[0].classes[0];
        assert_eq!((c.size_bytes, c.qps, c.buffers), (64 << 10, 2, 8));
        assert_eq!(c.bytes, 8 * (64 << 10));
        // A connection that only ever sends 100 KiB never holds more than 2 such buffers.
        let small = super::plan(&[end("a", 64 << 10, 100 << 10, 2)], &p).unwrap();
        assert_eq!(small.nics[0].classes[0].buffers, 2);
    }

    #[test]
    fn sub_page_classes_pack_and_the_region_rounds_to_the_pinning_page() {
        let mut p = params();
        p.pin_page_bytes = 2 << 20;
        p.headroom = 0.25;
        let plan = plan(&[end("a", 100, 1 << 20, 1), end("a", 100, 1 << 20, 1)], &p).unwrap();
        let n = &plan.nics[0];
        // 2 ends x 4 buffers of 128 bytes: 1 KiB, one base page.
        assert_eq!(n.classes[0].buffers, 8);
        assert_eq!(n.need_bytes, 4096);
        assert_eq!(n.region_bytes, 2 << 20);
        assert_eq!(plan.total_pinned_bytes(), 2 << 20);
    }

    #[test]
    fn hosts_sum_their_nics_and_bad_parameters_are_refused() {
        let p = params();
        let mut e = vec![end("a", 4096, 1 << 30, 1), end("b", 4096, 1 << 30, 1)];
        e[1].host = e[0].host.clone();
        let plan = plan(&e, &p).unwrap();
        assert_eq!(plan.hosts.len(), 1);
        assert_eq!(plan.total_pinned_bytes(), 2 * 4 * 4096);
        let mut bad = params();
        bad.wr_depth = 0;
        assert!(super::plan(&e, &bad).is_err());
        bad = params();
        bad.headroom = f64::NAN;
        assert!(super::plan(&e, &bad).is_err());
    }
}
