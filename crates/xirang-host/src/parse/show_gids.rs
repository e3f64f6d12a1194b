//! `show_gids` (the MLNX_OFED script listing every GID of every RDMA port): one row per
//! GID, `DEV PORT INDEX GID [IPv4] VER NETDEV`, under a two-line header and above an
//! `n_gids_found=N` trailer. Rows come tab-separated or, pasted, space-aligned; the IPv4
//! column is empty for GIDs that do not map an IPv4 address.

use serde::Serialize;

use super::{ParseError, lines};

const FORMAT: &str = "show_gids";

/// One GID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidRow {
    /// RDMA device (`mlx5_0`).
    pub device: String,
    /// Port number.
    pub port: u8,
    /// GID table index.
    pub index: u16,
    /// The GID.
    pub gid: String,
    /// The IPv4 address it maps, when it maps one.
    pub ipv4: Option<String>,
    /// RoCE version: `v1` or `v2`.
    pub version: String,
    /// The netdev the GID belongs to.
    pub netdev: Option<String>,
}

impl GidRow {
    /// The type as sysfs `gid_attrs/types/N` prints it.
    pub fn sysfs_type(&self) -> &'static str {
        if self.version == "v2" {
            "RoCE v2"
        } else {
            "IB/RoCE v1"
        }
    }
}

/// Parses the whole output.
pub fn parse(text: &str) -> Result<Vec<GidRow>, ParseError> {
    let mut out = Vec::new();
    let mut header = false;
    for (n, line) in lines(text) {
        let t = line.trim();
        if t.is_empty() || t.starts_with("---") || t.starts_with("n_gids_found=") {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.first() == Some(&"DEV") {
            header = true;
            continue;
        }
        if !header {
            return Err(ParseError::new(
                FORMAT,
                n,
                "the `DEV PORT INDEX GID IPv4 VER DEV` header",
                t,
            ));
        }
        let bad = |what: &str| ParseError::new(FORMAT, n, what.to_string(), t);
        if f.len() < 5 || f.len() > 7 {
            return Err(bad("a row `DEV PORT INDEX GID [IPv4] VER [NETDEV]`"));
        }
        let port = f[1]
            .parse()
            .map_err(|_| bad("a port number in the second column"))?;
        let index = f[2].parse().map_err(|_| bad("a GID index in the third column"))?;
        let gid = f[3];
        if gid.split(':').count() != 8 || !gid.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
            return Err(bad(
                "a GID of eight `:`-separated hexadecimal groups in the fourth column",
            ));
        }
        let mut rest = &f[4..];
        let ipv4 = match rest.first() {
            Some(a) if a.parse::<std::net::Ipv4Addr>().is_ok() => {
                rest = &rest[1..];
                Some(a.to_string())
            }
            _ => None,
        };
        let version = match rest.first() {
            Some(v) if *v == "v1" || *v == "v2" => v.to_string(),
            _ => {
                return Err(bad(
                    "the RoCE version `v1` or `v2` after the GID (and IPv4 address)",
                ));
            }
        };
        let netdev = match &rest[1..] {
            [] => None,
            [d] => Some(d.to_string()),
            _ => return Err(bad("at most a netdev name after the version")),
        };
        out.push(GidRow {
            device: f[0].to_string(),
            port,
            index,
            gid: gid.to_string(),
            ipv4,
            version,
            netdev,
        });
    }
    if !header {
        return Err(ParseError::new(
            FORMAT,
            0,
            "the `DEV PORT INDEX GID IPv4 VER DEV` header",
            "",
        ));
    }
    Ok(out)
}
