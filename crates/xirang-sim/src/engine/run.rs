//! The run loop, in windows: the same loop drives one engine or the partitions of a
//! parallel run, so that both take the same steps and give the same bytes.
//!
//! Time is cut into windows of the fabric's shortest link delay (the *grid*). A device
//! reaches another only by a packet on a link, which arrives at least one link delay after
//! it left, so nothing done inside a window can reach another device inside the same
//! window: the partitions of a parallel run process one window each, then exchange the
//! packets that crossed between them (the lookahead of conservative parallel simulation,
//! shared/reference/scale-and-parallel.md §3). Empty windows are skipped: the next window
//! is the grid cell of the earliest pending event.
//!
//! Samples are taken between windows, before any event of their instant, and the next one
//! is due while anything is pending. The run stops at the end of the grid cell in which the
//! last flow finished (the events of that cell still run, in every partition), at the end
//! time, or when nothing is pending.

use xirang_fabric::model::Fabric;

use super::event::Event;
use super::ids::QpId;
use super::{NEVER, Sim};
use crate::queue::{Queue, time_of};
use crate::time::{PS_PER_NS, PS_PER_US, Ps};

/// The window for a fabric: its shortest link delay. Links of less than a nanosecond (none
/// in real fabrics) give a 1 ns window, and a parallel run cannot cut them.
pub(crate) fn grid(fabric: &Fabric) -> Ps {
    fabric
        .links
        .iter()
        .map(|l| l.delay_ns * PS_PER_NS)
        .min()
        .map_or(PS_PER_US, |d| d.max(PS_PER_NS))
}

/// What the loop knows of the engine (or of all partitions together) between windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    /// Earliest pending event or timer.
    pub(crate) next: Option<Ps>,
    /// Flows not yet sent.
    pub(crate) flows_left: usize,
}

/// The loop's next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Process every event before `limit`.
    Window { limit: Ps },
    /// Take a sample at this time.
    Sample(Ps),
    /// Stop; with the end time when the run was cut there with work pending.
    Stop { at_end: Option<Ps> },
}

/// The loop's state: a pure function of the statuses it is given, so every thread of a
/// parallel run, given the same merged status, takes the same step.
#[derive(Debug, Clone)]
pub(crate) struct Coordinator {
    grid: Ps,
    end: Ps,
    interval: Option<Ps>,
    next_sample: Option<Ps>,
    /// Set once the last flow finished: the end of that window's grid cell.
    stop_at: Option<Ps>,
    /// Start of the last window.
    window_start: Option<Ps>,
}

impl Coordinator {
    pub(crate) fn new(grid: Ps, end: Option<Ps>, interval: Option<Ps>) -> Coordinator {
        Coordinator {
            grid,
            end: end.unwrap_or(NEVER),
            interval,
            next_sample: interval,
            stop_at: None,
            window_start: None,
        }
    }

    pub(crate) fn step(&mut self, s: Status) -> Step {
        if s.flows_left == 0 && self.stop_at.is_none() {
            match self.window_start {
                // Nothing to run at all.
                None => return Step::Stop { at_end: None },
                Some(w) => self.stop_at = Some((w / self.grid + 1) * self.grid),
            }
        }
        let t = match (s.next, self.next_sample) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return Step::Stop { at_end: None },
            },
        };
        if t > self.end {
            return Step::Stop {
                at_end: (self.end != NEVER).then_some(self.end),
            };
        }
        if self.stop_at.is_some_and(|at| t >= at) {
            return Step::Stop { at_end: None };
        }
        if self.next_sample == Some(t) {
            self.next_sample = None;
            return Step::Sample(t);
        }
        let mut limit = (t / self.grid + 1) * self.grid;
        if let Some(ns) = self.next_sample {
            limit = limit.min(ns);
        }
        if let Some(at) = self.stop_at {
            limit = limit.min(at);
        }
        limit = limit.min(self.end.saturating_add(1));
        self.window_start = Some(t);
        Step::Window { limit }
    }

    /// A sample was taken at `t`; `s` is the status after it. The next one is due while
    /// anything else can still happen.
    pub(crate) fn sampled(&mut self, t: Ps, s: Status) {
        if let (Some(iv), Some(_)) = (self.interval, s.next) {
            self.next_sample = Some(t + iv);
        }
    }
}

impl<Q: Queue> Sim<Q> {
    /// Runs until every flow is done, the end time, or nothing is pending. `progress` is
    /// called with the simulated time every few thousand events.
    pub fn run(&mut self, progress: &mut dyn FnMut(Ps)) {
        const PROGRESS_EVERY: u64 = 1 << 16;
        let mut c = Coordinator::new(self.grid, self.end, self.sample_interval);
        let mut reported = 0;
        loop {
            match c.step(self.status()) {
                Step::Window { limit } => {
                    self.run_before(limit);
                    if self.events - reported >= PROGRESS_EVERY {
                        reported = self.events;
                        progress(self.now);
                    }
                }
                Step::Sample(t) => {
                    self.take_sample(t);
                    c.sampled(t, self.status());
                }
                Step::Stop { at_end } => {
                    if let Some(e) = at_end {
                        self.now = e;
                    }
                    break;
                }
            }
        }
        self.settle_pause_durations();
    }

    /// Where this engine stands between windows.
    pub(crate) fn status(&self) -> Status {
        let timer = self.rto.peek().map(|(k, _)| time_of(k));
        Status {
            next: match (self.q.peek_time(), timer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            flows_left: self.flows_left,
        }
    }

    /// A sample at `t`, counted as an event as it is one step of the run.
    pub(crate) fn take_sample(&mut self, t: Ps) {
        debug_assert!(t >= self.now, "invariant: time never goes backwards");
        self.now = t;
        self.events += 1;
        self.sample();
    }

    /// Processes every pending event before `limit`, in (time, event) order.
    pub(crate) fn run_before(&mut self, limit: Ps) {
        let last = limit - 1;
        loop {
            // The event queue and the ACK timers are keyed alike, so popping whichever
            // holds the smaller key keeps the order one queue would have.
            let timer = self.rto.peek();
            let (t, e) = match self.q.pop_before(timer.map_or(u128::MAX, |(k, _)| k), last) {
                Some((t, e)) => (t, Event::decode(e)),
                None => match timer {
                    Some((k, qp)) if time_of(k) <= last => {
                        self.rto.pop();
                        (time_of(k), Event::Rto(QpId(qp)))
                    }
                    _ => break,
                },
            };
            debug_assert!(t >= self.now, "invariant: time never goes backwards");
            self.now = t;
            self.dispatch(e);
            self.events += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(next: Option<Ps>, flows_left: usize) -> Status {
        Status { next, flows_left }
    }

    #[test]
    fn windows_follow_the_grid_and_stop_at_the_end_of_the_last_flows_cell() {
        let mut c = Coordinator::new(1000, None, None);
        assert_eq!(c.step(status(Some(2500), 1)), Step::Window { limit: 3000 });
        // The last flow finished inside [2500, 3000): its cell still runs to 3000.
        assert_eq!(c.step(status(Some(2999), 0)), Step::Window { limit: 3000 });
        assert_eq!(c.step(status(Some(3000), 0)), Step::Stop { at_end: None });
    }

    #[test]
    fn samples_come_before_the_events_of_their_instant_and_stop_when_idle() {
        let mut c = Coordinator::new(1000, None, Some(500));
        assert_eq!(c.step(status(Some(500), 1)), Step::Sample(500));
        c.sampled(500, status(Some(500), 1));
        assert_eq!(c.step(status(Some(500), 1)), Step::Window { limit: 1000 });
        assert_eq!(c.step(status(None, 1)), Step::Sample(1000));
        c.sampled(1000, status(None, 1));
        assert_eq!(c.step(status(None, 1)), Step::Stop { at_end: None });
    }

    #[test]
    fn an_end_time_cuts_the_run_and_reports_itself_when_work_is_pending() {
        let mut c = Coordinator::new(1000, Some(1500), None);
        assert_eq!(c.step(status(Some(1200), 1)), Step::Window { limit: 1501 });
        assert_eq!(c.step(status(Some(1800), 1)), Step::Stop { at_end: Some(1500) });
        let mut c = Coordinator::new(1000, None, None);
        assert_eq!(c.step(status(None, 0)), Step::Stop { at_end: None });
    }
}
