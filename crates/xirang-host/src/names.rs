//! The grammar of names and values read from a host: checked before any of them becomes
//! a path, a program's argument or part of a command. A host writes its own sysfs and
//! snapshot, so a compromised or misconfigured one can name an interface `-x` or give a
//! PCI address of `0000:01:00.0;reboot`; such a value is reported, never used.
//!
//! Each grammar is the real one where the kernel or a standard defines it, narrowed
//! where the real one admits characters no deployment uses and every shell or option
//! parser treats specially (the narrowing is stated per kind).

use std::fmt;

/// What a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A host name (RFC 1123 labels; `_` admitted, as inventories use it).
    Hostname,
    /// A network interface name (the kernel's `dev_valid_name`, narrowed).
    Netdev,
    /// An RDMA device name (`mlx5_0`, `rxe0`, `mlx5_bond_0`).
    RdmaDevice,
    /// A PCI address, `DDDD:BB:DD.F` (domain of 4 to 8 hex digits, as Linux prints it).
    PciAddress,
    /// A board id / PSID (`MT_0000000359`, or a vendor's description on hfi1).
    BoardId,
    /// A firmware version (`22.38.1002`).
    FwVersion,
    /// An HCA type (`MT4125`).
    HcaType,
}

impl Kind {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hostname => "host name",
            Kind::Netdev => "interface name",
            Kind::RdmaDevice => "RDMA device name",
            Kind::PciAddress => "PCI address",
            Kind::BoardId => "board id",
            Kind::FwVersion => "firmware version",
            Kind::HcaType => "HCA type",
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Kind::Hostname => {
                "labels of letters, digits, `-` and `_` separated by dots, none starting with `-`, at most 253 characters"
            }
            Kind::Netdev => {
                "1 to 15 characters of letters, digits and `_ . - @ +`, not starting with `-` or `.`"
            }
            Kind::RdmaDevice => {
                "1 to 63 characters of letters, digits and `_ . -`, not starting with `-` or `.`"
            }
            Kind::PciAddress => {
                "DDDD:BB:DD.F in hexadecimal (a 4- to 8-digit domain, device 00-1f, function 0-7)"
            }
            Kind::BoardId => {
                "1 to 128 characters of letters, digits, spaces and `_ . , : + ( ) -`, not starting with `-` or a space"
            }
            Kind::FwVersion => {
                "1 to 64 characters of letters, digits and `. _ -`, starting with a letter or digit"
            }
            Kind::HcaType => {
                "1 to 64 characters of letters, digits, spaces and `_ . -`, starting with a letter or digit"
            }
        }
    }
}

/// A value that does not fit its grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadName {
    /// What it should have been.
    pub kind: Kind,
    /// The value as read.
    pub value: String,
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} does not fit its grammar (expected {}); a value read from a host that does not fit is never put in a path or command",
            self.kind.name(),
            self.value,
            self.kind.expected()
        )
    }
}

impl std::error::Error for BadName {}

/// Longest host name (RFC 1123 2.1, via RFC 1035 2.3.4).
const MAX_HOSTNAME: usize = 253;
/// Longest host name label (RFC 1035 2.3.4).
const MAX_LABEL: usize = 63;
/// Longest interface name: IFNAMSIZ (16, include/uapi/linux/if.h) less the NUL.
const MAX_NETDEV: usize = 15;
/// Longest RDMA device name: IB_DEVICE_NAME_MAX (64, include/rdma/ib_verbs.h) less the NUL.
const MAX_RDMA_DEVICE: usize = 63;
/// Board ids are 16-byte PSIDs on mlx5; hfi1 reports a description of about 80
/// characters (crates/xirang-host/test_data/sysfs): twice that is room without admitting a blob.
const MAX_BOARD_ID: usize = 128;
/// Room for any version string seen (`22.38.1002`, `2.31.5050`, `1.27.0`).
const MAX_VERSION: usize = 64;

fn name_like(s: &str, max: usize, extra: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= max
        && !s.starts_with(['-', '.'])
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
}

fn pci(s: &str) -> bool {
    let hex = |p: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
    };
    let mut it = s.split(':');
    let (Some(dom), Some(bus), Some(devfn), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return false;
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    hex(dom, 4, 8)
        && hex(bus, 2, 2)
        && hex(dev, 2, 2)
        && u8::from_str_radix(dev, 16).is_ok_and(|d| d < 0x20)
        && func.len() == 1
        && (b'0'..=b'7').contains(&func.as_bytes()[0])
}

/// Whether `value` fits the grammar of `kind`.
pub fn fits(kind: Kind, value: &str) -> bool {
    match kind {
        Kind::Hostname => {
            !value.is_empty()
                && value.len() <= MAX_HOSTNAME
                && value.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= MAX_LABEL
                        && !l.starts_with('-')
                        && l.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                })
        }
        // The kernel refuses `/`, `:` and whitespace and admits the rest; names
        // outside letters, digits and `_ . - @ +` are refused here too.
        Kind::Netdev => name_like(value, MAX_NETDEV, b"_.-@+"),
        Kind::RdmaDevice => name_like(value, MAX_RDMA_DEVICE, b"_.-"),
        Kind::PciAddress => pci(value),
        Kind::BoardId => {
            !value.starts_with([' ', '-'])
                && !value.is_empty()
                && value.len() <= MAX_BOARD_ID
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b" _.,:+()-".contains(&b))
        }
        Kind::FwVersion => {
            value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.len() <= MAX_VERSION
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
        Kind::HcaType => {
            value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.len() <= MAX_VERSION
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b" _.-".contains(&b))
        }
    }
}

/// `Ok` when `value` fits the grammar of `kind`.
pub fn check(kind: Kind, value: &str) -> Result<(), BadName> {
    if fits(kind, value) {
        Ok(())
    } else {
        Err(BadName {
            kind,
            value: value.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_values_fit_and_hostile_ones_do_not() {
        for (k, v) in [
            (Kind::Hostname, "gpu-node-017.cluster.local"),
            (Kind::Netdev, "enp65s0f0np0"),
            (Kind::Netdev, "bond0.100"),
            (Kind::RdmaDevice, "mlx5_bond_0"),
            (Kind::PciAddress, "0000:19:00.0"),
            (Kind::PciAddress, "10000:e1:1f.7"),
            (Kind::BoardId, "MT_0000000359"),
            (
                Kind::BoardId,
                "HPE 100Gb 1-port OP101 QSFP28 x16 PCIe Gen3 with Intel Omni-Path Adapter",
            ),
            (Kind::FwVersion, "22.38.1002"),
            (Kind::HcaType, "MT4125"),
        ] {
            assert!(fits(k, v), "{k:?} {v}");
        }
        for (k, v) in [
            (Kind::Hostname, "-oProxyCommand=sh"),
            (Kind::Hostname, "../etc"),
            (Kind::Hostname, ""),
            (Kind::Netdev, "a;b"),
            (Kind::Netdev, "-x"),
            (Kind::Netdev, ".."),
            (Kind::Netdev, "averyveryverylong0"),
            (Kind::Netdev, "eth0\n"),
            (Kind::RdmaDevice, "mlx5_0/../x"),
            (Kind::PciAddress, "0000:01:00.0;echo INJECTED"),
            (Kind::PciAddress, "0000:01:20.0"),
            (Kind::PciAddress, "0000:01:00.8"),
            (Kind::BoardId, "MT_1/../../x"),
            (Kind::BoardId, "$(reboot)"),
            (Kind::FwVersion, "1.2 3"),
            (Kind::HcaType, "'"),
        ] {
            assert!(!fits(k, v), "{k:?} {v}");
            assert!(check(k, v).unwrap_err().to_string().contains("expected"));
        }
    }
}
