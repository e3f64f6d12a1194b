//! Congestion-control timers and rate changes at the reaction point. The algorithms are
//! pure state machines in `crate::cc`; this module drives them with the QP's timers
//! (DCQCN's rate-decrease check and rate-increase timer) and re-times the QP's next packet
//! when its rate goes up, as a NIC's rate limiter applies a new rate at once.

use super::Sim;
use super::event::Event;
use super::ids::QpId;
use super::nic::{Cc, QpTx};
use crate::queue::Queue;
use crate::time::{Ps, tx_time_at};

/// Time a QP's rate limiter waits after a packet whose line serialization is `line_tx`.
#[inline]
pub(crate) fn paced_gap(q: &QpTx, line_tx: Ps) -> Ps {
    let rate = q.rate_bps();
    if rate >= q.line_bps {
        line_tx
    } else {
        tx_time_at(q.last_wire, rate).max(line_tx)
    }
}

impl<Q: Queue> Sim<Q> {
    /// DCQCN's rate-decrease check (scheduled by a CNP).
    pub(crate) fn dcqcn_dec(&mut self, qi: QpId) {
        let now = self.now;
        let q = self.xport.tx_mut(qi);
        if q.retired() {
            return;
        }
        let Cc::Dcqcn(pi, s) = &mut q.cc else { return };
        if s.on_dec_check(now, self.cc.dcqcn(*pi)) && !q.inc_pending {
            q.inc_pending = true;
            let t = s.inc_deadline.expect("set by a decrease");
            self.schedule(t, Event::DcqcnInc(qi));
        }
    }

    /// DCQCN's rate-increase timer.
    pub(crate) fn dcqcn_inc(&mut self, qi: QpId) {
        let now = self.now;
        let q = self.xport.tx_mut(qi);
        let retired = q.retired();
        let Cc::Dcqcn(pi, s) = &mut q.cc else { return };
        if retired {
            q.inc_pending = false;
            return;
        }
        let deadline = s.inc_deadline.expect("armed");
        if deadline > now {
            // A later decrease restarted the timer: chase the new deadline.
            self.schedule(deadline, Event::DcqcnInc(qi));
            return;
        }
        s.on_inc_timer(now, self.cc.dcqcn(*pi));
        // A persistent QP back at line rate has nothing left to recover: its timer stops
        // until the next decrease (DCQCN's increase ends at the target rate).
        let recovered = s.rc >= q.line_bps && s.rt >= q.line_bps;
        let next = s.inc_deadline.expect("rearmed");
        if q.persistent() && q.done && recovered {
            q.inc_pending = false;
            return;
        }
        self.schedule(next, Event::DcqcnInc(qi));
        self.rate_raised(qi);
    }

    /// The QP's rate changed either way: the packet after the last one leaves one gap at
    /// the new rate after it (the HPCC simulator's `ChangeRate` shifts `m_nextAvail` by
    /// the difference of the two gaps).
    pub(crate) fn rate_changed(&mut self, qi: QpId) {
        let q = self.xport.tx_mut(qi);
        if q.done || q.snd_nxt >= q.size || q.last_wire == 0 {
            return;
        }
        let line_tx = self.fab.port(q.src_port).rate.tx_time(q.last_wire);
        let at = q.last_sent + paced_gap(q, line_tx);
        let sooner = at < q.next_avail;
        q.next_avail = at;
        if sooner {
            let sp = q.src_port;
            self.kick(sp);
        }
    }

    /// The QP's rate went up: the packet after the last one may leave sooner.
    pub(crate) fn rate_raised(&mut self, qi: QpId) {
        let now = self.now;
        let q = self.xport.tx_mut(qi);
        if q.done || q.snd_nxt >= q.size || q.next_avail <= now {
            return;
        }
        let line_tx = self.fab.port(q.src_port).rate.tx_time(q.last_wire);
        let sooner = (q.last_sent + paced_gap(q, line_tx)).max(now);
        if sooner < q.next_avail {
            q.next_avail = sooner;
            let sp = q.src_port;
            self.kick(sp);
        }
    }
}
