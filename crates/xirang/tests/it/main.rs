//! Integration tests: they run the real `xirang` binary.
//!
//! - `util`: the harness (a temp dir, a command, readable failures).
//! - `topo`, `scenario`: one module per command family.

mod scenario;
mod topo;
mod util;
