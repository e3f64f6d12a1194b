//! Xirang's audit: rules over what hosts and switches really are, grouped by layer
//! (physical, network, transport, application), each finding with the evidence read and
//! the fix; and the conversion of the audited inventory into the fabric model, so a real
//! cluster can be simulated and tuned.
//!
//! - [`cluster`]: loading hosts (directories or snapshots), SONiC switch configs, the
//!   cabling and the policy;
//! - [`rules`]: the rules and their findings; [`bonds`]: those on bonds and NIC layout;
//! - [`report`]: table, JSON and SARIF renderings;
//! - [`as_scenario`]: inventory → explicit topology scenario.

pub mod as_scenario;
pub mod bonds;
pub mod cluster;
pub mod report;
pub mod rules;

pub use cluster::{AuditError, Cluster};
pub use rules::{Finding, Layer, Severity, audit};
