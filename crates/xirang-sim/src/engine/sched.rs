//! Who schedules: the component that makes every event's [`Tie`] (the device handling
//! the current event, each device's count of events it scheduled, whether the run is
//! still being set up) and knows the run's end. Its state is its own: the engine asks
//! it for ties and tells it which device's event runs, and nothing else reads or writes
//! its fields.
//!
//! ```
//! use xirang_sim::engine::sched::Sched;
//! let mut s = Sched::new(4, None);
//! let tie = s.tie(1_000, 2);
//! assert_eq!(tie.target(1_000), 2);
//! ```
//!
//! Another component cannot reach into it:
//!
//! ```compile_fail
//! use xirang_sim::engine::sched::Sched;
//! let mut s = Sched::new(4, None);
//! s.dev_seq[2] = 0; // private: only `Sched` counts a device's events
//! ```

use super::GLOBAL_DEV;
use crate::queue::{Key, Tie};
use crate::time::Ps;

/// Who schedules, and the run's end.
#[derive(Debug)]
pub struct Sched {
    /// The device whose event is being handled: the scheduler of the events it queues.
    cur: u32,
    /// Events each device has scheduled (wrapping): the last part of a tie.
    dev_seq: Vec<u32>,
    /// While the run is set up, each device schedules its own first events.
    in_setup: bool,
    end: Option<Ps>,
}

impl Sched {
    /// For a run of `devices` devices (NICs and switches) ending at `end` (None: when
    /// every flow is done), in set-up.
    pub fn new(devices: usize, end: Option<Ps>) -> Sched {
        Sched {
            cur: GLOBAL_DEV,
            dev_seq: vec![0; devices + 1],
            in_setup: true,
            end,
        }
    }

    /// The tie of an event at `t` for device `target` scheduled now: the device it is
    /// for, the device scheduling it (the one whose event is being handled; in set-up
    /// the target itself, as each device schedules its own first events), and that
    /// device's count of events it scheduled. Events at one time run device by device,
    /// and each device's in an order that depends only on what devices did before, never
    /// on the order the queue received them in; so the order is the same however the
    /// fabric is divided among partitions. The target's field is permuted by a hash of
    /// the time ([`Tie::event`]): which of two devices goes first at an instant changes
    /// from instant to instant, as on real hardware, instead of always favouring the
    /// lower index (a fixed order made one sender win every simultaneous grab of a shared
    /// credit gate).
    #[inline(always)]
    pub fn tie(&mut self, t: Ps, target: u32) -> Tie {
        let source = if self.in_setup { target } else { self.cur };
        let slot = (source as usize).min(self.dev_seq.len() - 1);
        let seq = self.dev_seq[slot];
        self.dev_seq[slot] = seq.wrapping_add(1);
        Tie::event(t, target, source, seq)
    }

    /// The event with key `k` is about to run: its device schedules what follows.
    #[inline(always)]
    pub fn running(&mut self, k: Key) {
        self.cur = k.tie().target(k.time());
    }

    /// Device `dev` schedules what follows, as if its event were running: for events a
    /// device queues outside an event of its own (a fast-forward's re-queued flow starts).
    #[inline]
    pub fn act_as(&mut self, dev: u32) {
        self.cur = dev;
    }

    /// True while the run is set up.
    #[inline(always)]
    pub fn in_setup(&self) -> bool {
        self.in_setup
    }

    /// Set-up is over: from now on events are scheduled by the device handling one.
    pub fn start_run(&mut self) {
        self.in_setup = false;
    }

    /// When the run stops (None: when every flow is done).
    pub fn end(&self) -> Option<Ps> {
        self.end
    }
}
