//! `xirang memreg loopback`: the pool on a real RDMA device. Two devices (in the test
//! bed, two rxe devices on the ends of a veth pair) each register one pool; an RC queue
//! pair on each connects to the other; RDMA WRITEs and READs in both directions move
//! data between pool buffers, and every byte is checked. The devices' `sent_pkts` and
//! `rcvd_pkts` hw_counters are read before and after and must have risen by at least
//! the packets the operations need. Finally one registration per operation
//! (`ibv_reg_mr` + `ibv_dereg_mr`) is timed against a pool get+put.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::verbs::{Device, Qp, VerbsBackend, WC_SUCCESS};
use crate::{Buf, ClassSpec, MemregError, Pool, PoolConfig};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoopbackConfig {
    /// The two devices (they may be the same device).
    pub devices: [String; 2],
    /// Port on each.
    pub port: u8,
    /// GID index on each.
    pub gid_index: u8,
    /// Path MTU, bytes (256 to 4096, a power of two).
    pub mtu_bytes: u32,
    /// Rounds over every class.
    pub rounds: u32,
    /// Buffer classes of each pool.
    pub classes: Vec<ClassSpec>,
    /// Registrations to time (`ibv_reg_mr` + `ibv_dereg_mr` of the middle class's size).
    pub register_ops: u32,
    /// Where hw_counters are read (`/sys/class/infiniband`).
    pub sysfs_root: PathBuf,
}

impl LoopbackConfig {
    /// Defaults for two devices: 4 KiB, 64 KiB and 1 MiB classes of 4 buffers, MTU 1024,
    /// 8 rounds.
    pub fn new(a: &str, b: &str) -> LoopbackConfig {
        LoopbackConfig {
            devices: [a.to_string(), b.to_string()],
            port: 1,
            gid_index: 0,
            mtu_bytes: 1024,
            rounds: 8,
            classes: vec![
                ClassSpec {
                    size_bytes: 4 << 10,
                    count: 4,
                },
                ClassSpec {
                    size_bytes: 64 << 10,
                    count: 4,
                },
                ClassSpec {
                    size_bytes: 1 << 20,
                    count: 4,
                },
            ],
            register_ops: 200,
            sysfs_root: PathBuf::from("/sys/class/infiniband"),
        }
    }
}

/// One hw_counter of one device, before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterDelta {
    /// Device.
    pub device: String,
    /// Counter name.
    pub counter: &'static str,
    /// Before the traffic.
    pub before: u64,
    /// After it.
    pub after: u64,
    /// The least rise the operations need.
    pub expected_min: u64,
}

/// What the run found.
#[derive(Debug, Clone)]
pub struct LoopbackReport {
    /// The devices.
    pub devices: [String; 2],
    /// Whether each device registers dma-buf memory.
    pub dmabuf: [bool; 2],
    /// RDMA WRITEs completed.
    pub writes: u64,
    /// RDMA READs completed.
    pub reads: u64,
    /// Bytes moved and compared.
    pub bytes_checked: u64,
    /// `ibv_reg_mr` calls each pool made during the traffic (none: the pools fail fast
    /// and never grow, and a pool never registers per buffer; a guard against that).
    pub registrations: [u64; 2],
    /// `ibv_reg_mr` calls each pool made when it was built (one region each).
    pub registrations_at_start: [u64; 2],
    /// The pools' high-water marks.
    pub high_water: [usize; 2],
    /// Buffers still out after the run (must be 0).
    pub in_use_after: [usize; 2],
    /// The packet counters.
    pub counters: Vec<CounterDelta>,
    /// Bytes per timed registration.
    pub register_bytes: usize,
    /// Mean `ibv_reg_mr` + `ibv_dereg_mr`, ns.
    pub register_ns: f64,
    /// Mean pool get+put of the same size, ns.
    pub pool_pair_ns: f64,
}

impl LoopbackReport {
    /// Counters that rose less than the traffic needs.
    pub fn short_counters(&self) -> Vec<&CounterDelta> {
        self.counters
            .iter()
            .filter(|c| c.after.saturating_sub(c.before) < c.expected_min)
            .collect()
    }

    /// Buffers still out after the run.
    pub fn leaked(&self) -> bool {
        self.in_use_after.iter().any(|&n| n > 0)
    }

    /// Registrations other than one region per pool at start and none during the
    /// traffic.
    pub fn reregistered(&self) -> bool {
        self.registrations.iter().any(|&n| n > 0) || self.registrations_at_start != [1, 1]
    }

    /// The test passed: every counter rose as the traffic needs, no buffer leaked, no
    /// registration beyond the pools' own.
    pub fn passed(&self) -> bool {
        self.short_counters().is_empty() && !self.leaked() && !self.reregistered()
    }
}

fn mtu_enum(bytes: u32) -> Result<u32, MemregError> {
    use crate::verbs::{MTU_256, MTU_512, MTU_1024, MTU_2048, MTU_4096};
    match bytes {
        256 => Ok(MTU_256),
        512 => Ok(MTU_512),
        1024 => Ok(MTU_1024),
        2048 => Ok(MTU_2048),
        4096 => Ok(MTU_4096),
        _ => Err(MemregError::Config(format!(
            "expected a path MTU of 256, 512, 1024, 2048 or 4096 bytes, found {bytes}"
        ))),
    }
}

/// Completion wait per operation: generous, since TCG emulation slows rxe by orders of
/// magnitude.
const OP_TIMEOUT: Duration = Duration::from_secs(20);

fn read_counter(root: &std::path::Path, dev: &str, port: u8, name: &str) -> Result<u64, MemregError> {
    let p = root
        .join(dev)
        .join("ports")
        .join(port.to_string())
        .join("hw_counters")
        .join(name);
    let s = std::fs::read_to_string(&p)
        .map_err(|e| MemregError::Verbs(format!("cannot read {}: {e}", p.display())))?;
    s.trim().parse().map_err(|_| {
        MemregError::Verbs(format!(
            "{}: expected a counter value, found {:?}",
            p.display(),
            s.trim()
        ))
    })
}

/// A byte pattern that differs per operation and per offset.
fn pattern(seed: u64, i: usize) -> u8 {
    (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ (i as u8).wrapping_mul(31) ^ (i >> 8) as u8
}

fn fill(buf: &mut Buf<'_>, seed: u64) {
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
}

fn first_mismatch(got: &[u8], seed: u64) -> Option<usize> {
    got.iter().enumerate().position(|(i, b)| *b != pattern(seed, i))
}

/// One RDMA operation from `qp`, waited for; `local` is the initiator's buffer.
fn rdma(qp: &Qp, read: bool, wr_id: u64, local: &Buf<'_>, remote: &Buf<'_>) -> Result<(), MemregError> {
    // SAFETY: `local` is a pool buffer registered on the QP's device with its lkey, and
    // both buffers stay borrowed (alive, untouched) until the completion is polled below.
    unsafe {
        qp.post_rdma(
            read,
            wr_id,
            crate::verbs::Sge {
                addr: local.addr() as u64,
                length: local.len() as u32,
                lkey: local.keys().lkey,
            },
            remote.addr() as u64,
            remote.keys().rkey,
        )?
    };
    let wc = qp.poll(1, OP_TIMEOUT)?;
    let what = if read { "READ" } else { "WRITE" };
    match wc.first() {
        None => Err(MemregError::Verbs(format!(
            "RDMA {what} {wr_id} of {} bytes: no completion in {OP_TIMEOUT:?}",
            local.len()
        ))),
        Some(w) if w.status != WC_SUCCESS || w.wr_id != wr_id => Err(MemregError::Verbs(format!(
            "RDMA {what} {wr_id}: completion status {} (wr_id {}, vendor error {:#x})",
            w.status, w.wr_id, w.vendor_err
        ))),
        Some(_) => Ok(()),
    }
}

/// One RDMA operation from `qp` (see [`rdma`]), then every byte of its destination (the
/// remote buffer of a WRITE, the local one of a READ) checked against the pattern `seed`
/// that the source was filled with.
fn rdma_checked(
    qp: &Qp,
    read: bool,
    wr_id: u64,
    local: &Buf<'_>,
    remote: &Buf<'_>,
    seed: u64,
    path: &str,
) -> Result<(), MemregError> {
    rdma(qp, read, wr_id, local, remote)?;
    let dest = if read { local } else { remote };
    match first_mismatch(dest.as_slice(), seed) {
        None => Ok(()),
        Some(i) => Err(MemregError::Verbs(format!(
            "RDMA {} {wr_id} ({} bytes, {path}): byte {i} differs",
            if read { "READ" } else { "WRITE" },
            local.len()
        ))),
    }
}

/// Runs the loopback; an error names the operation, buffer and byte that failed.
pub fn run(cfg: &LoopbackConfig) -> Result<LoopbackReport, MemregError> {
    let mtu = mtu_enum(cfg.mtu_bytes)?;
    let devs = [
        Device::open(Some(&cfg.devices[0]))?,
        Device::open(Some(&cfg.devices[1]))?,
    ];
    let backends = [
        Arc::new(VerbsBackend::new(devs[0].clone())),
        Arc::new(VerbsBackend::new(devs[1].clone())),
    ];
    let pools = [
        Pool::new(PoolConfig::new(cfg.classes.clone()), backends[0].clone())?,
        Pool::new(PoolConfig::new(cfg.classes.clone()), backends[1].clone())?,
    ];
    let regs_before = [backends[0].registrations(), backends[1].registrations()];
    let qps = [
        Qp::new(&devs[0], cfg.port, cfg.gid_index)?,
        Qp::new(&devs[1], cfg.port, cfg.gid_index)?,
    ];
    let info = [qps[0].info()?, qps[1].info()?];
    qps[0].connect(&info[1], mtu)?;
    qps[1].connect(&info[0], mtu)?;

    let names = ["sent_pkts", "rcvd_pkts"];
    let mut before = Vec::new();
    for d in &cfg.devices {
        for n in names {
            before.push(read_counter(&cfg.sysfs_root, d, cfg.port, n)?);
        }
    }
    // Packets each device must send: a WRITE sends ceil(len/MTU) from its initiator; a
    // READ sends one request from the initiator and ceil(len/MTU) responses back.
    let mut must_send = [0u64; 2];
    let (mut writes, mut reads, mut bytes) = (0u64, 0u64, 0u64);
    let mut wr_id = 0u64;
    for round in 0..cfg.rounds {
        for class in 0..cfg.classes.len() {
            // Device 0 writes into device 1, reads it back; device 1 writes into device 0.
            let (d0, d1) = (&cfg.devices[0], &cfg.devices[1]);
            let mut a = pools[0].get_class(class)?;
            let len = a.len();
            let pkts = len.div_ceil(cfg.mtu_bytes as usize) as u64;
            let seed = (u64::from(round) << 16) | class as u64;
            fill(&mut a, seed);
            let mut b = pools[1].get_class(class)?;
            b.as_mut_slice().fill(0);
            wr_id += 1;
            rdma_checked(&qps[0], false, wr_id, &a, &b, seed, &format!("{d0} -> {d1}"))?;
            must_send[0] += pkts;
            writes += 1;
            let mut c = pools[0].get_class(class)?;
            c.as_mut_slice().fill(0);
            wr_id += 1;
            rdma_checked(&qps[0], true, wr_id, &c, &b, seed, &format!("{d0} <- {d1}"))?;
            must_send[0] += 1;
            must_send[1] += pkts;
            reads += 1;
            let seed2 = seed ^ 0xffff_0000;
            let mut d = pools[1].get_class(class)?;
            fill(&mut d, seed2);
            let mut e = pools[0].get_class(class)?;
            e.as_mut_slice().fill(0);
            wr_id += 1;
            rdma_checked(&qps[1], false, wr_id, &d, &e, seed2, &format!("{d1} -> {d0}"))?;
            must_send[1] += pkts;
            writes += 1;
            bytes += 3 * len as u64;
        }
    }
    let mut counters = Vec::new();
    for (di, d) in cfg.devices.iter().enumerate() {
        for (ni, n) in names.iter().enumerate() {
            let after = read_counter(&cfg.sysfs_root, d, cfg.port, n)?;
            // A device receives what its peer sends (a device looped onto itself does both).
            let expected_min = if ni == 0 { must_send[di] } else { must_send[1 - di] };
            counters.push(CounterDelta {
                device: d.clone(),
                counter: n,
                before: before[di * 2 + ni],
                after,
                expected_min,
            });
        }
    }
    let registrations = [
        backends[0].registrations() - regs_before[0],
        backends[1].registrations() - regs_before[1],
    ];
    let high_water = [pools[0].stats().high_water, pools[1].stats().high_water];
    let in_use_after = [pools[0].stats().in_use, pools[1].stats().in_use];

    // Registering per operation against taking a pool buffer, same size, same device.
    let mid = &cfg.classes[cfg.classes.len() / 2];
    let scratch = pools[0].get_class(cfg.classes.len() / 2)?;
    let ops = cfg.register_ops.max(1);
    let t = Instant::now();
    for _ in 0..ops {
        devs[0].register_once(scratch.addr(), mid.size_bytes)?;
    }
    let register_ns = t.elapsed().as_nanos() as f64 / f64::from(ops);
    drop(scratch);
    let pairs = 100_000u32;
    let t = Instant::now();
    for _ in 0..pairs {
        std::hint::black_box(pools[0].get_class(cfg.classes.len() / 2)?);
    }
    let pool_pair_ns = t.elapsed().as_nanos() as f64 / f64::from(pairs);

    Ok(LoopbackReport {
        devices: cfg.devices.clone(),
        dmabuf: [devs[0].dmabuf_supported(), devs[1].dmabuf_supported()],
        writes,
        reads,
        bytes_checked: bytes,
        registrations,
        registrations_at_start: regs_before,
        high_water,
        in_use_after,
        counters,
        register_bytes: mid.size_bytes,
        register_ns,
        pool_pair_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_names_follow_the_verbs_enum() {
        assert_eq!(mtu_enum(1024).unwrap(), crate::verbs::MTU_1024);
        assert!(mtu_enum(1500).is_err());
    }

    #[test]
    fn the_pattern_differs_between_operations_and_offsets() {
        let a: Vec<u8> = (0..4096).map(|i| pattern(1, i)).collect();
        let b: Vec<u8> = (0..4096).map(|i| pattern(2, i)).collect();
        assert_ne!(a, b);
        assert_eq!(first_mismatch(&a, 1), None);
        assert!(first_mismatch(&a, 2).is_some());
        // Not constant within a buffer, so a shifted or partial copy is caught.
        assert!(a.windows(2).any(|w| w[0] != w[1]));
        assert_ne!(a[..256], a[256..512]);
    }

    #[test]
    fn counters_short_of_the_traffic_are_reported() {
        let r = LoopbackReport {
            devices: ["a".into(), "b".into()],
            dmabuf: [false; 2],
            writes: 1,
            reads: 0,
            bytes_checked: 0,
            registrations: [0, 0],
            registrations_at_start: [1, 1],
            high_water: [1, 1],
            in_use_after: [0, 0],
            counters: vec![
                CounterDelta {
                    device: "a".into(),
                    counter: "sent_pkts",
                    before: 10,
                    after: 14,
                    expected_min: 4,
                },
                CounterDelta {
                    device: "b".into(),
                    counter: "rcvd_pkts",
                    before: 10,
                    after: 13,
                    expected_min: 4,
                },
            ],
            register_bytes: 4096,
            register_ns: 1.0,
            pool_pair_ns: 1.0,
        };
        let short = r.short_counters();
        assert_eq!(short.len(), 1);
        assert_eq!(short[0].device, "b");
    }
}
