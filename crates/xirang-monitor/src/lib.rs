//! Xirang's monitoring agent: samples RDMA counters through the host reader, derives
//! health signals, exports them to Prometheus, keeps local history and evaluates alert
//! rules; replays simulator output through the same pipeline.
//!
//! - [`collect`]: one sampling round (counters → monotonic metrics, derived signals);
//! - [`expose`]: Prometheus text and OpenMetrics rendering;
//! - [`alerts`]: threshold rules over the signals;
//! - [`history`]: the local SQLite history (raw samples, 1-minute roll-ups, retention,
//!   bounded size, crash-safe);
//! - [`replay`]: a simulator output directory as a series of rounds;
//! - [`inspector`]: NCCL Inspector's JSON-lines files as its Prometheus series;
//! - [`nccl_ras`]: NCCL RAS's client protocol and its monitor events as series;
//! - [`sonic`]: a SONiC switch's COUNTERS_DB, read through [`redis`] (a bounded RESP2
//!   client), as the simulator names switch counters;
//! - [`web`]: the exporter-toolkit web configuration (TLS, basic authentication).

pub mod alerts;
pub mod collect;
pub mod expose;
pub mod history;
pub mod inspector;
pub mod nccl_ras;
pub mod redis;
pub mod replay;
pub mod serve;
pub mod sonic;
pub mod web;
