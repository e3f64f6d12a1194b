//! Xirang's counter schema, shared by the monitoring agent (real hosts) and the simulator
//! (simulated ones), so diagnosis reads both through one vocabulary:
//!
//! - [`Entity`]: what a counter belongs to (a NIC port, a netdev, a switch port, a switch
//!   queue, a switch port's ingress priority group), with the text form both sides print
//!   (`h3/mlx5_0/1`, `h3/ens1np0`, `leaf0:5`, `leaf0:5/q3`, `leaf0:5/pg3`);
//! - [`CounterValue`]: one counter of one entity, named as the hardware names it;
//! - [`spec`]: a counter's unit, scale to its base unit and width (32-bit Q-counters wrap),
//!   and the Prometheus metric it becomes ([`metric`]: node_exporter's `node_infiniband_*`
//!   names where node_exporter has the counter, `xirang_*` otherwise);
//! - [`inspector`]: NCCL Inspector's series (names, labels, message-size buckets), which
//!   a replay serves and calibration reads;
//! - [`RateTracker`]: deltas and rates between samples, with 32- and 64-bit wraparound,
//!   resets (a counter that goes down) and counters that appear or vanish;
//! - [`sim_out`]: the simulator's output directory, the counters it writes in this
//!   schema, owned in one place for its writer (`xirang sim`) and its readers (replay,
//!   diagnosis).

pub mod inspector;
pub mod metric;
pub mod rate;
pub mod sim_out;
pub mod spec;
pub mod time;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use rate::{Change, RateTracker};
pub use spec::{CounterSpec, Unit, Width};

/// What a counter belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entity {
    /// A port of an RDMA device: `host/device/port` (ports from 1, as RDMA tools print).
    NicPort {
        /// Host name.
        host: String,
        /// RDMA device, e.g. `mlx5_0`.
        device: String,
        /// Port number.
        port: u16,
    },
    /// A network interface: `host/ifname` (its `ethtool -S` and statistics counters).
    Netdev {
        /// Host name.
        host: String,
        /// Interface name.
        ifname: String,
    },
    /// A switch port: `switch:port`.
    SwitchPort {
        /// Switch name.
        switch: String,
        /// Port (a number in the simulator, `EthernetN` on SONiC).
        port: String,
    },
    /// An egress queue of a switch port: `switch:port/qN`.
    Queue {
        /// Switch name.
        switch: String,
        /// Port.
        port: String,
        /// Queue index.
        queue: u8,
    },
    /// An ingress priority group of a switch port: `switch:port/pgN` (SONiC's
    /// `COUNTERS_PG_NAME_MAP`; the simulator has none).
    PriorityGroup {
        /// Switch name.
        switch: String,
        /// Port.
        port: String,
        /// Priority group index.
        pg: u8,
    },
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::NicPort { host, device, port } => write!(f, "{host}/{device}/{port}"),
            Entity::Netdev { host, ifname } => write!(f, "{host}/{ifname}"),
            Entity::SwitchPort { switch, port } => write!(f, "{switch}:{port}"),
            Entity::Queue { switch, port, queue } => write!(f, "{switch}:{port}/q{queue}"),
            Entity::PriorityGroup { switch, port, pg } => write!(f, "{switch}:{port}/pg{pg}"),
        }
    }
}

/// An entity string that is none of the four forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}`: expected an entity `host/device/port`, `host/ifname`, `switch:port`, `switch:port/qN` or `switch:port/pgN`"
)]
pub struct EntityError(pub String);

impl FromStr for Entity {
    type Err = EntityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || EntityError(s.to_string());
        let nonempty = |x: &str| {
            if x.is_empty() {
                Err(err())
            } else {
                Ok(x.to_string())
            }
        };
        if let Some((switch, rest)) = s.split_once(':') {
            if let Some((port, pg)) = rest.split_once("/pg") {
                return Ok(Entity::PriorityGroup {
                    switch: nonempty(switch)?,
                    port: nonempty(port)?,
                    pg: pg.parse().map_err(|_| err())?,
                });
            }
            return match rest.split_once("/q") {
                Some((port, q)) => Ok(Entity::Queue {
                    switch: nonempty(switch)?,
                    port: nonempty(port)?,
                    queue: q.parse().map_err(|_| err())?,
                }),
                None if !rest.contains('/') => Ok(Entity::SwitchPort {
                    switch: nonempty(switch)?,
                    port: nonempty(rest)?,
                }),
                None => Err(err()),
            };
        }
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [host, device, port] => Ok(Entity::NicPort {
                host: nonempty(host)?,
                device: nonempty(device)?,
                port: port.parse().map_err(|_| err())?,
            }),
            [host, ifname] => Ok(Entity::Netdev {
                host: nonempty(host)?,
                ifname: nonempty(ifname)?,
            }),
            _ => Err(err()),
        }
    }
}

/// One named counter value of one entity, in the hardware's own unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterValue {
    /// The entity, in its text form (`h3/mlx5_0/1`, `leaf0:5`, `leaf0:5/q3`).
    pub entity: String,
    /// The hardware's name (`port_xmit_data`, `rx_prio3_pause_duration`,
    /// `SAI_PORT_STAT_PFC_3_RX_PKTS`).
    pub name: String,
    /// Value in the hardware's unit (see [`spec::spec`]).
    pub value: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_round_trip() {
        for s in [
            "h3/mlx5_0/1",
            "h3/ens1np0",
            "leaf0:5",
            "leaf0:5/q3",
            "leaf1:Ethernet8",
            "leaf1:Ethernet8/q3",
            "leaf1:Ethernet8/pg3",
        ] {
            let e: Entity = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        for bad in [
            "",
            "h3",
            "a/b/c/d",
            "h3/mlx5_0/x",
            ":5",
            "leaf0:",
            "leaf0:5/qx",
            "leaf0:5/pg",
            "leaf0:/pg3",
            "/x",
        ] {
            assert!(bad.parse::<Entity>().is_err(), "{bad}");
        }
    }
}
