//! `ethtool -S <if>` statistics, with helpers for the mlx5 (ConnectX) counter names.
//!
//! The text is a list of `name: value` lines, optionally under a `NIC statistics:` header.
//! ethtool indents the counters; copies pasted into bug trackers often lose the indentation
//! or the header, so both are optional. Counters are kept in file order because drivers
//! print related groups together and the order helps a human reading a dump.

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "ethtool -S";

/// All counters of one `ethtool -S` dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EthtoolStats {
    /// `(name, value)` in the order the driver printed them.
    pub counters: Vec<(String, u64)>,
}

/// Direction of a per-priority counter: `rx_prio<p>_*` or `tx_prio<p>_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Direction {
    /// Received (`rx_` prefix).
    Rx,
    /// Transmitted (`tx_` prefix).
    Tx,
}

/// Physical-port error and drop counters of an mlx5 port; `None` when the dump lacks the
/// counter (older drivers, or a dump that only lists non-zero counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhyErrors {
    /// FCS errors (`rx_crc_errors_phy`; `check_seq_err` on old drivers).
    pub rx_crc_errors_phy: Option<u64>,
    /// Physical coding errors (`rx_symbol_err_phy`; `symbol_err` on old drivers).
    pub rx_symbol_err_phy: Option<u64>,
    /// Errors FEC could not correct (`rx_pcs_symbol_err_phy`).
    pub rx_pcs_symbol_err_phy: Option<u64>,
    /// Bits FEC corrected (`rx_corrected_bits_phy`).
    pub rx_corrected_bits_phy: Option<u64>,
    /// Link flaps (`link_down_events_phy`).
    pub link_down_events_phy: Option<u64>,
    /// Receive drops for lack of NIC buffer (`rx_discards_phy`; `in_discards` on old drivers).
    pub rx_discards_phy: Option<u64>,
    /// Transmit drops (`tx_discards_phy`; `out_discards` on old drivers).
    pub tx_discards_phy: Option<u64>,
    /// Receive queue had no software buffer (`rx_out_of_buffer`).
    pub rx_out_of_buffer: Option<u64>,
    /// Frames longer than the MTU (`rx_oversize_pkts_phy`; `too_long_errors` on old drivers).
    pub rx_oversize_pkts_phy: Option<u64>,
    /// The NIC sent pause frames for too long (`tx_pause_storm_warning_events`).
    pub tx_pause_storm_warning_events: Option<u64>,
    /// The pause watchdog disabled pause sending (`tx_pause_storm_error_events`).
    pub tx_pause_storm_error_events: Option<u64>,
}

impl EthtoolStats {
    /// Parses the whole output of `ethtool -S`.
    pub fn parse(text: &str) -> Result<EthtoolStats, ParseError> {
        let mut counters = Vec::new();
        for (no, raw) in lines(text) {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            // The header is only meaningful before the first counter; later it would be a
            // second dump glued on, which the caller should split.
            if counters.is_empty() && line == "NIC statistics:" {
                continue;
            }
            counters.push(parse_counter(no, line)?);
        }
        if counters.is_empty() {
            return Err(ParseError::new(
                FORMAT,
                0,
                "at least one `name: value` counter line",
                "",
            ));
        }
        Ok(EthtoolStats { counters })
    }

    /// The value of the first counter called `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// A per-priority counter `<rx|tx>_prio<prio>_<what>`, e.g. `(Rx, 3, "pause")` reads
    /// `rx_prio3_pause` and `(Tx, 3, "pause_duration")` reads `tx_prio3_pause_duration`.
    pub fn prio(&self, direction: Direction, prio: u8, what: &str) -> Option<u64> {
        let dir = match direction {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        };
        self.get(&format!("{dir}_prio{prio}_{what}"))
    }

    /// The physical-port error counters, falling back to the pre-4.9 kernel names where the
    /// old name counts the same IEEE 802.3 / RFC 2863 register.
    pub fn phy_errors(&self) -> PhyErrors {
        let either = |new: &str, old: &str| self.get(new).or_else(|| self.get(old));
        PhyErrors {
            rx_crc_errors_phy: either("rx_crc_errors_phy", "check_seq_err"),
            rx_symbol_err_phy: either("rx_symbol_err_phy", "symbol_err"),
            rx_pcs_symbol_err_phy: self.get("rx_pcs_symbol_err_phy"),
            rx_corrected_bits_phy: self.get("rx_corrected_bits_phy"),
            link_down_events_phy: self.get("link_down_events_phy"),
            rx_discards_phy: either("rx_discards_phy", "in_discards"),
            tx_discards_phy: either("tx_discards_phy", "out_discards"),
            rx_out_of_buffer: self.get("rx_out_of_buffer"),
            rx_oversize_pkts_phy: either("rx_oversize_pkts_phy", "too_long_errors"),
            tx_pause_storm_warning_events: self.get("tx_pause_storm_warning_events"),
            tx_pause_storm_error_events: self.get("tx_pause_storm_error_events"),
        }
    }
}

/// Parses the whole output of `ethtool -S`; same as [`EthtoolStats::parse`].
pub fn parse(text: &str) -> Result<EthtoolStats, ParseError> {
    EthtoolStats::parse(text)
}

fn parse_counter(no: usize, line: &str) -> Result<(String, u64), ParseError> {
    let bad = |expected: &str| ParseError::new(FORMAT, no, expected, line);
    // Split at the last colon: some drivers prefix names with a ring tag (`[0]: rx_bytes`).
    let (name, value) = line
        .rsplit_once(':')
        .ok_or_else(|| bad("a `name: value` counter line"))?;
    let name = name.trim();
    let value = value.trim();
    if name.is_empty() {
        return Err(bad("a counter name before `:`"));
    }
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("an unsigned decimal counter value after `name:`"));
    }
    let value = value
        .parse::<u64>()
        .map_err(|_| bad("a counter value that fits in 64 bits"))?;
    Ok((name.to_string(), value))
}
