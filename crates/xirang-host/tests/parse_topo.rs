//! Parsers of `nvidia-smi topo -m`, `lspci -vvv` and `lspci -tv` against real captures in
//! `test_data/` (values read by eye from the files and their SOURCE.md), plus error reporting.

use xirang_host::parse::lspci::{self, PciDevice, PciTreeNode, PcieLinkInfo};
use xirang_host::parse::nvidia_topo::{self, Conn, DeviceKind, TopoMatrix};

const TOPO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/nvidia-smi-topo");
const LSPCI_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test_data/lspci");

const H100_8NIC: &str = "h100-8gpu-8nic-nv18-topo-m.txt";
const H100_12NIC: &str = "h100-8gpu-12nic-ib-plus-eth-topo-m.txt";
const ESC8000A_TOPO: &str = "asus-esc8000a-4gpu-rtx6000ada-4nic-cx7-topo-m.txt";

const CX7: &str = "esc8000a-connectx7-21.00.0-lspci-vvv.txt";
const GPU_IDLE: &str = "esc8000a-rtx6000ada-01.00.0-idle-speed-downgraded-lspci-vvv.txt";
const HIGHPOINT: &str = "esc8000a-highpoint-ssd7540-71.00.0-width-downgraded-lspci-vvv.txt";
const GREP_ACS: &str = "esc8000a-lspci-vvv-grep-ACSCtl.txt";
const TREE: &str = "esc8000a-lspci-tv.txt";

fn read(dir: &str, name: &str) -> String {
    let path = format!("{dir}/{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn topo(name: &str) -> TopoMatrix {
    nvidia_topo::parse(&read(TOPO_DIR, name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn one_device(name: &str) -> PciDevice {
    let devs = lspci::parse_vvv(&read(LSPCI_DIR, name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(devs.len(), 1, "{name}");
    devs.into_iter().next().unwrap()
}

fn tree() -> Vec<PciTreeNode> {
    lspci::parse_tree(&read(LSPCI_DIR, TREE)).unwrap_or_else(|e| panic!("{TREE}: {e}"))
}

fn link(speed_gts: f64, width: u8, downgraded_note: bool) -> Option<PcieLinkInfo> {
    Some(PcieLinkInfo {
        speed_gts,
        width,
        downgraded_note,
    })
}

fn code(m: &TopoMatrix, a: &str, b: &str) -> String {
    m.between(a, b)
        .map(Conn::code)
        .unwrap_or_else(|| panic!("no {a}<->{b}"))
}

// ---- every fixture ----------------------------------------------------------------------

/// Each `.txt` in test_data is claimed by one parser here, so a fixture added later cannot go
/// unparsed; the structural invariants hold for all of them.
#[test]
fn every_fixture_parses() {
    let mut seen = 0;
    for dir in [TOPO_DIR, LSPCI_DIR] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if !name.ends_with(".txt") {
                continue;
            }
            seen += 1;
            let text = read(dir, &name);
            if name.ends_with("-topo-m.txt") {
                let m = nvidia_topo::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                let n = m.devices.len();
                assert_eq!(m.conn.len(), n, "{name}");
                for (i, row) in m.conn.iter().enumerate() {
                    assert_eq!(row.len(), n, "{name} row {i}");
                    for (j, c) in row.iter().enumerate() {
                        assert_eq!(*c == Conn::SelfLink, i == j, "{name} [{i}][{j}]");
                        assert_eq!(Some(c), m.conn.get(j).and_then(|r| r.get(i)), "{name} symmetric");
                    }
                }
                let nics = m.devices.iter().filter(|d| d.kind == DeviceKind::Nic).count();
                assert_eq!(m.nic_names.len(), nics, "{name}: one legend entry per NIC");
            } else if name.ends_with("-lspci-tv.txt") {
                let roots = lspci::parse_tree(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                let entries = lspci::tree_entries(&roots);
                let mut bdfs: Vec<&str> = entries.iter().map(|e| e.bdf.as_str()).collect();
                bdfs.sort_unstable();
                bdfs.dedup();
                assert_eq!(bdfs.len(), entries.len(), "{name}: addresses are unique");
            } else if name.contains("lspci-vvv") {
                lspci::parse_vvv(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            } else {
                panic!("{name}: no parser claims this fixture");
            }
        }
    }
    assert_eq!(seen, 8);
}

// ---- nvidia-smi topo -m -----------------------------------------------------------------

#[test]
fn topo_h100_8nic_rail_optimised() {
    let m = topo(H100_8NIC);
    let names: Vec<&str> = m.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names.len(), 16);
    assert_eq!(names.first(), Some(&"GPU0"));
    assert_eq!(names.last(), Some(&"NIC7"));
    assert_eq!(m.devices.iter().filter(|d| d.kind == DeviceKind::Gpu).count(), 8);

    assert_eq!(code(&m, "GPU0", "GPU7"), "NV18");
    assert_eq!(m.between("GPU3", "GPU5"), Some(&Conn::NvLink(18)));
    for i in 0..8 {
        let gpu = format!("GPU{i}");
        assert_eq!(code(&m, &gpu, &format!("NIC{i}")), "PIX", "{gpu}");
        assert_eq!(
            code(&m, &gpu, &format!("mlx5_{i}")),
            "PIX",
            "{gpu} by legend name"
        );
        assert_eq!(
            m.nearest_nic(&gpu),
            Some((format!("NIC{i}").as_str(), &Conn::Pix))
        );
    }
    assert_eq!(code(&m, "GPU0", "NIC1"), "NODE");
    assert_eq!(code(&m, "GPU0", "NIC4"), "SYS");
    assert_eq!(code(&m, "mlx5_4", "GPU4"), "PIX");
    assert_eq!(code(&m, "NIC0", "NIC1"), "NODE");
    assert_eq!(code(&m, "NIC7", "NIC7"), "X");

    let gpu0 = &m.devices[0];
    assert_eq!(gpu0.cpu_affinity.as_deref(), Some("0-47,96-143"));
    assert_eq!(gpu0.numa_affinity.as_deref(), Some("0"));
    assert_eq!(gpu0.gpu_numa_id, None, "N/A");
    let gpu4 = &m.devices[4];
    assert_eq!(gpu4.cpu_affinity.as_deref(), Some("48-95,144-191"));
    assert_eq!(gpu4.numa_affinity.as_deref(), Some("1"));
    let nic0 = &m.devices[8];
    assert_eq!((nic0.kind, nic0.cpu_affinity.as_ref()), (DeviceKind::Nic, None));

    assert_eq!(m.nic_names.len(), 8);
    assert_eq!(m.nic_names[7], ("NIC7".to_string(), "mlx5_7".to_string()));
    assert_eq!(m.nic_name("NIC3"), "mlx5_3");
    assert_eq!(m.nic_name("GPU3"), "GPU3");

    let pasted = format!("NVIDIA Topology: \n{}", read(TOPO_DIR, H100_8NIC));
    assert_eq!(
        nvidia_topo::parse(&pasted).unwrap(),
        m,
        "sglang.check_env preamble skipped"
    );
}

#[test]
fn topo_h100_12nic_three_pix_nics_per_gpu() {
    let m = topo(H100_12NIC);
    assert_eq!(m.devices.len(), 20);
    for nic in ["NIC0", "NIC1", "NIC2"] {
        assert_eq!(code(&m, "GPU0", nic), "PIX", "{nic}");
    }
    assert_eq!(code(&m, "GPU0", "NIC3"), "NODE");
    assert_eq!(code(&m, "GPU1", "mlx5_3"), "PIX");
    assert_eq!(code(&m, "GPU5", "NIC9"), "PIX");
    assert_eq!(code(&m, "GPU7", "mlx5_11"), "PIX");
    assert_eq!(code(&m, "GPU0", "NIC11"), "SYS");
    assert_eq!(code(&m, "NIC0", "NIC2"), "PIX");
    // Three PIX NICs tie; the first in header order wins (mlx5_0, the InfiniBand rail).
    assert_eq!(m.nearest_nic("GPU0"), Some(("NIC0", &Conn::Pix)));
    assert_eq!(m.nearest_nic("GPU4"), Some(("NIC6", &Conn::Pix)));
    assert_eq!(m.nearest_nic("GPU7"), Some(("NIC11", &Conn::Pix)));

    assert_eq!(m.devices[0].cpu_affinity.as_deref(), Some("4,6,8,10,12"));
    assert_eq!(m.devices[7].cpu_affinity.as_deref(), Some("1,3,5,7,9,11"));
    assert_eq!(m.devices[7].numa_affinity.as_deref(), Some("1"));
    assert_eq!(m.nic_names[10], ("NIC10".to_string(), "mlx5_10".to_string()));
    assert_eq!(m.nic_name("NIC11"), "mlx5_11");
}

#[test]
fn topo_esc8000a_pcie_only_no_gpudirect_path() {
    let m = topo(ESC8000A_TOPO);
    assert_eq!(m.devices.len(), 8);
    assert_eq!(code(&m, "GPU0", "GPU1"), "NODE");
    assert_eq!(code(&m, "GPU0", "GPU2"), "SYS");
    assert_eq!(code(&m, "GPU0", "NIC0"), "NODE");
    assert_eq!(code(&m, "GPU0", "mlx5_2"), "SYS");
    assert_eq!(code(&m, "NIC0", "NIC1"), "PIX", "two ports of one ConnectX-7");
    assert_eq!(m.nearest_nic("GPU2"), Some(("NIC2", &Conn::Node)));
    assert_eq!(m.nearest_nic("GPU0"), Some(("NIC0", &Conn::Node)));
    // No GPU<->NIC pair is within PXB: GPUDirect RDMA would cross the host bridge.
    for g in 0..4 {
        for n in 0..4 {
            let c = m.between(&format!("GPU{g}"), &format!("NIC{n}")).unwrap();
            assert!(*c > Conn::Pxb, "GPU{g} NIC{n} {c}");
        }
    }
    assert!(m.conn.iter().flatten().all(|c| !matches!(c, Conn::NvLink(_))));
    assert_eq!(m.devices[2].cpu_affinity.as_deref(), Some("32-63"));
    assert_eq!(m.devices[2].numa_affinity.as_deref(), Some("1"));
    assert_eq!(m.devices[3].gpu_numa_id, None);
    assert_eq!(m.nic_name("NIC3"), "mlx5_3");
}

/// Older drivers: RDMA device names as columns, only `CPU Affinity`, real tabs, `SOC`.
#[test]
fn topo_old_driver_layout_with_tabs() {
    let text = "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\r\n\
                GPU0\t X \tNV2\tPHB\tSOC\t0-9,20-29\r\n\
                GPU1\tNV2\t X \tSOC\tPHB\t10-19,30-39\r\n\
                mlx5_0\tPHB\tSOC\t X \tSOC\t\r\n\
                mlx5_1\tSOC\tPHB\tSOC\t X \t\r\n\
                \r\n\
                Legend:\r\n\
                \r\n\
                \x20 X    = Self\r\n\
                \x20 SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\r\n";
    let m = nvidia_topo::parse(text).unwrap();
    assert_eq!(m.devices[2].name, "mlx5_0");
    assert_eq!(m.devices[2].kind, DeviceKind::Nic);
    assert_eq!(m.devices[1].cpu_affinity.as_deref(), Some("10-19,30-39"));
    assert_eq!(m.devices[1].numa_affinity, None);
    assert_eq!(m.between("GPU0", "mlx5_1"), Some(&Conn::Sys));
    assert_eq!(m.between("GPU1", "GPU0"), Some(&Conn::NvLink(2)));
    assert_eq!(m.nearest_nic("GPU1"), Some(("mlx5_1", &Conn::Phb)));
    assert!(m.nic_names.is_empty());
    assert_eq!(m.nic_name("mlx5_1"), "mlx5_1");
    assert_eq!(m.between("GPU0", "GPU9"), None);
    assert_eq!(m.nearest_nic("mlx9"), None);
}

#[test]
fn conn_codes_order_and_json() {
    let ladder =
        ["X", "NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"].map(|c| Conn::from_code(c).unwrap());
    assert!(ladder.windows(2).all(|w| w[0] < w[1]), "{ladder:?}");
    assert_eq!(
        ladder.map(|c| c.code()).join(" "),
        "X NV18 NV4 PIX PXB PHB NODE SYS"
    );
    assert_eq!(Conn::from_code("SOC"), Some(Conn::Sys));
    for bad in ["NV", "NV-1", "NV256", "pix", "x", "NVX", ""] {
        assert_eq!(Conn::from_code(bad), None, "{bad}");
    }
    let m = topo(ESC8000A_TOPO);
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["conn"][0][1], "NODE");
    assert_eq!(json["devices"][4]["kind"], "Nic");
    assert_eq!(serde_json::to_string(&Conn::NvLink(18)).unwrap(), "\"NV18\"");
}

// ---- nvidia-smi topo -m errors ----------------------------------------------------------

fn topo_err(text: &str) -> xirang_host::parse::ParseError {
    match nvidia_topo::parse(text) {
        Ok(m) => panic!("accepted: {m:?}"),
        Err(e) => e,
    }
}

#[test]
fn topo_errors_name_line_and_expectation() {
    let e = topo_err("");
    assert_eq!((e.line, e.format), (0, "nvidia-smi topo -m"));
    assert!(e.expected.contains("header"), "{e}");

    let e = topo_err("\n\nLegend:\n  X = Self\n");
    assert_eq!(e.line, 3);
    assert!(e.expected.contains("GPU0"), "{e}");
    assert_eq!(e.found, "Legend:");

    // A preamble is skipped, so the header is found and the real problem reported.
    let e = topo_err("$ nvidia-smi topo -m\nNVIDIA Topology:\n\tGPU0\tNIC0\nGPU0\t X \tPIX\n");
    assert_eq!(e.line, 5);
    assert!(e.expected.contains("row for NIC0"), "{e}");

    let hdr = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\n";
    let e = topo_err(&format!(
        "{hdr}GPU0\t X \tNV18\tPIX\t0-3\nGPU1\tNV18\t X \tPIQ\t0-3\n"
    ));
    assert_eq!(e.line, 3);
    assert!(e.expected.contains("connection code"), "{e}");
    assert_eq!(e.found, "PIQ");

    let e = topo_err(&format!("{hdr}GPU0\t X \tNV18\n"));
    assert_eq!(e.line, 2);
    assert!(e.expected.contains("3 connection cells"), "{e}");

    let e = topo_err(&format!(
        "{hdr}GPU0\t X \tNV18\tPIX\t0-3\nGPU1\tNV18\t X \tPIX\t0-3\n"
    ));
    assert_eq!(e.line, 4, "the row that never came");
    assert!(e.expected.contains("row for NIC0"), "{e}");

    let e = topo_err(&format!("{hdr}GPU1\tNV18\t X \tPIX\t0-3\n"));
    assert_eq!(e.line, 2);
    assert!(e.expected.contains("row for GPU0"), "{e}");

    let e = topo_err(&format!("{hdr}GPU0\tPIX\tNV18\tPIX\t0-3\n"));
    assert_eq!(e.line, 2);
    assert!(e.expected.contains("X on the diagonal"), "{e}");

    let e = topo_err(&format!("{hdr}GPU0\t X \tNV18\tPIX\t0-3\t0\tN/A\n"));
    assert_eq!(e.line, 2);
    assert!(e.expected.contains("at most 1 affinity"), "{e}");

    let e = topo_err("\tGPU0\tCPU Affinity\tNIC0\n");
    assert!(e.expected.contains("affinity columns"), "{e}");
    assert_eq!((e.line, e.found.as_str()), (1, "NIC0"));

    let ok = "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n\nNIC Legend:\n\n  NIC0: mlx5_0\n";
    assert_eq!(nvidia_topo::parse(ok).unwrap().nic_name("NIC0"), "mlx5_0");
    let e = topo_err(&ok.replace("NIC0: mlx5_0", "NIC0:"));
    assert_eq!(e.line, 7);
    assert!(e.expected.contains("NIC legend entry"), "{e}");
    assert!(
        e.to_string().starts_with("nvidia-smi topo -m line 7: expected"),
        "{e}"
    );
}

// ---- lspci -vvv -------------------------------------------------------------------------

#[test]
fn lspci_connectx7_healthy_gen5_x16() {
    let d = one_device(CX7);
    assert_eq!(d.bdf, "0000:21:00.0");
    assert_eq!(d.class_desc, "Ethernet controller");
    assert_eq!(d.description, "Mellanox Technologies MT2910 Family [ConnectX-7]");
    assert_eq!(d.lnk_cap, link(32.0, 16, false));
    assert_eq!(d.lnk_sta, link(32.0, 16, false));
    assert!(!d.is_downgraded());
    assert_eq!(d.lnk_ctl2_target_gts, Some(32.0));
    assert_eq!(d.numa_node, Some(0));
    assert_eq!(d.physical_slot, None);
    assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(
        d.acs_ctl.as_deref(),
        Some("SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-")
    );
}

#[test]
fn lspci_gpu_idle_speed_downgrade() {
    let d = one_device(GPU_IDLE);
    assert_eq!(d.bdf, "0000:01:00.0");
    assert_eq!(d.class_desc, "VGA compatible controller");
    assert_eq!(
        d.description,
        "NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1) (prog-if 00 [VGA controller])"
    );
    assert_eq!(d.lnk_cap, link(16.0, 16, false));
    assert_eq!(d.lnk_sta, link(2.5, 16, true));
    assert!(d.is_downgraded());
    // Power saving, not a fault: the target speed is still Gen4.
    assert_eq!(d.lnk_ctl2_target_gts, Some(16.0));
    assert_eq!(d.numa_node, Some(0));
    assert_eq!(d.physical_slot.as_deref(), Some("3"));
    assert_eq!(d.driver.as_deref(), Some("nvidia"));
    assert_eq!(d.acs_ctl, None);
}

#[test]
fn lspci_highpoint_width_downgrade() {
    let d = one_device(HIGHPOINT);
    assert_eq!(d.bdf, "0000:71:00.0");
    assert_eq!(d.class_desc, "RAID bus controller");
    assert!(
        d.description.starts_with("HighPoint Technologies, Inc. SSD7540"),
        "{}",
        d.description
    );
    assert_eq!(d.lnk_cap, link(5.0, 2, false));
    assert_eq!(d.lnk_sta, link(5.0, 1, true));
    assert!(d.is_downgraded());
    assert_eq!(d.lnk_ctl2_target_gts, Some(5.0));
    assert_eq!(d.numa_node, Some(0));
    assert_eq!(d.driver, None, "no `Kernel driver in use:` line in this capture");
}

#[test]
fn lspci_many_devices_in_one_text() {
    let text = [CX7, GPU_IDLE, HIGHPOINT]
        .map(|f| read(LSPCI_DIR, f))
        .join("\n\n");
    let devs = lspci::parse_vvv(&text).unwrap();
    let bdfs: Vec<&str> = devs.iter().map(|d| d.bdf.as_str()).collect();
    assert_eq!(bdfs, ["0000:21:00.0", "0000:01:00.0", "0000:71:00.0"]);
    let down: Vec<bool> = devs.iter().map(PciDevice::is_downgraded).collect();
    assert_eq!(down, [false, true, true]);
    // Each device keeps its own fields: the CX-7's driver does not leak into the next one.
    assert_eq!(devs[2].driver, None);
    assert_eq!(devs[1].acs_ctl, None);
}

#[test]
fn lspci_grep_output_is_partial_but_usable() {
    let text = read(LSPCI_DIR, GREP_ACS);
    assert_eq!(lspci::parse_vvv(&text).unwrap(), vec![]);
    let acs = lspci::acs_ctl_values(&text);
    assert_eq!(
        acs.len(),
        46,
        "SOURCE.md says 47 lines: 46 ACSCtl plus the prompt"
    );
    assert!(
        acs.iter()
            .all(|v| v.ends_with("DirectTrans-") && !v.contains('+'))
    );
}

#[test]
fn lspci_domain_crlf_and_link_variants() {
    let text = "$ lspci -D -vvv -s 10000:e1:00.0\r\n\
                10000:E1:00.0 Non-Volatile memory controller [0108]: Samsung Electronics Co Ltd NVMe SSD Controller: PM9A3 [144d:a80a]\r\n\
                \tNUMA node: -1\r\n\
                \tLnkCap:\tPort #0, Speed 8GT/s, Width x4, ASPM L1, Exit Latency L1 <64us\r\n\
                \tLnkSta:\tSpeed unknown (downgraded), Width x0 (downgraded)\r\n\
                \tKernel driver in use: nvme\r\n";
    let devs = lspci::parse_vvv(text).unwrap();
    let d = &devs[0];
    assert_eq!(d.bdf, "10000:e1:00.0");
    assert_eq!(d.class_desc, "Non-Volatile memory controller [0108]");
    assert_eq!(
        d.description,
        "Samsung Electronics Co Ltd NVMe SSD Controller: PM9A3 [144d:a80a]"
    );
    assert_eq!(d.numa_node, Some(-1));
    assert_eq!(d.lnk_cap, link(8.0, 4, false));
    assert_eq!(d.lnk_sta, link(0.0, 0, true));
    assert!(d.is_downgraded());
    assert_eq!(d.driver.as_deref(), Some("nvme"));
}

fn vvv_err(text: &str) -> xirang_host::parse::ParseError {
    match lspci::parse_vvv(text) {
        Ok(d) => panic!("accepted: {d:?}"),
        Err(e) => e,
    }
}

#[test]
fn lspci_vvv_errors_name_line_and_expectation() {
    let hdr = "21:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n";
    let e = vvv_err(&format!(
        "{hdr}\tNUMA node: 0\n\tLnkCap: Port #0, Speed fastGT/s, Width x16\n"
    ));
    assert_eq!((e.format, e.line), ("lspci -vvv", 3));
    assert!(e.expected.contains("LnkCap `Speed <n>GT/s`"), "{e}");
    assert_eq!(e.found, "Speed fastGT/s");

    let e = vvv_err(&format!("{hdr}\tLnkSta: Speed 16GT/s, Width x300\n"));
    assert_eq!(e.line, 2);
    assert!(e.expected.contains("Width x<lanes>"), "{e}");

    let e = vvv_err(&format!("{hdr}\tLnkSta: Speed 16GT/s\n"));
    assert!(e.expected.contains("LnkSta with `Width x<lanes>`"), "{e}");

    let e = vvv_err(&format!("\n{hdr}\tNUMA node: zero\n"));
    assert_eq!(e.line, 3);
    assert!(e.expected.contains("NUMA node number"), "{e}");

    let e = vvv_err("21:00.9 Ethernet controller: x\n");
    assert_eq!(e.line, 1);
    assert!(e.expected.contains("device address"), "{e}");

    let e = vvv_err("21:00.0 Ethernet controller\n");
    assert!(e.expected.contains("<class>: <description>"), "{e}");
}

// ---- lspci -tv --------------------------------------------------------------------------

fn ancestors_of(entries: &[lspci::PciTreeEntry], bdf: &str) -> Vec<String> {
    entries
        .iter()
        .find(|e| e.bdf == bdf)
        .unwrap_or_else(|| panic!("{bdf} not in tree"))
        .ancestors
        .clone()
}

#[test]
fn lspci_tree_roots_and_ancestry() {
    let roots = tree();
    let root_names: Vec<&str> = roots.iter().map(|r| r.bdf_suffix.as_str()).collect();
    assert_eq!(
        root_names,
        [
            "[0000:00]",
            "[0000:20]",
            "[0000:40]",
            "[0000:60]",
            "[0000:80]",
            "[0000:a0]",
            "[0000:c0]",
            "[0000:e0]"
        ]
    );
    assert!(roots.iter().all(|r| r.bdf.is_none()));

    let entries = lspci::tree_entries(&roots);
    // 145 lines, but bridge chains put several devices on one line: 198 `-dd.f` in the file.
    assert_eq!(entries.len(), 198);

    let gpu = entries.iter().find(|e| e.bdf == "0000:01:00.0").unwrap();
    assert_eq!(
        gpu.description,
        "NVIDIA Corporation AD102GL [RTX 6000 Ada Generation]"
    );
    assert_eq!(gpu.ancestors, ["0000:00:01.1"]);

    assert_eq!(ancestors_of(&entries, "0000:21:00.0"), ["0000:20:03.1"]);
    assert_eq!(ancestors_of(&entries, "0000:21:00.1"), ["0000:20:03.1"]);
    assert_eq!(ancestors_of(&entries, "0000:81:00.0"), ["0000:80:01.1"]);
    assert_eq!(ancestors_of(&entries, "0000:00:01.1"), Vec::<String>::new());
    // The HighPoint function of the vvv fixture sits five bridges deep behind its own switch.
    assert_eq!(
        ancestors_of(&entries, "0000:71:00.0"),
        [
            "0000:60:01.1",
            "0000:61:00.0",
            "0000:62:0c.0",
            "0000:6f:00.0",
            "0000:70:14.0"
        ]
    );
    assert_eq!(
        ancestors_of(&entries, "0000:75:00.0"),
        ["0000:60:05.2", "0000:74:00.0"],
        "ASPEED behind its own bridge"
    );
    assert_eq!(ancestors_of(&entries, "0000:e2:00.0"), ["0000:e0:05.2"]);
    // GPU and NIC share no bridge, as `topo -m` says (NODE/SYS, never PIX/PXB).
    let gpu41 = ancestors_of(&entries, "0000:41:00.0");
    assert!(
        gpu41
            .iter()
            .all(|b| !ancestors_of(&entries, "0000:21:00.0").contains(b))
    );

    let tuples = lspci::device_ancestry(&roots);
    assert_eq!(tuples.len(), entries.len());
    let (bdf, desc, up) = &tuples[3];
    assert_eq!((bdf.as_str(), desc.as_str()), ("0000:00:01.1", ""));
    assert!(up.is_empty());
}

#[test]
fn lspci_tree_bridges_and_empty_buses() {
    let roots = tree();
    let bus60 = &roots[3];
    let rp = bus60
        .children
        .iter()
        .find(|c| c.bdf.as_deref() == Some("0000:60:01.1"))
        .unwrap();
    assert_eq!(rp.bdf_suffix, "01.1-[61-73]");
    assert_eq!(rp.bus_range, Some((0x61, 0x73)));
    assert_eq!(rp.description, "");
    assert_eq!(rp.children.len(), 1, "the switch upstream port 61:00.0");
    let downstream = &rp.children[0].children;
    let suffixes: Vec<&str> = downstream.iter().map(|c| c.bdf_suffix.as_str()).collect();
    assert_eq!(
        suffixes,
        ["00.0-[63-68]", "04.0-[69-6e]", "0c.0-[6f-72]", "1c.0-[73]"]
    );
    let empty = &downstream[3];
    assert_eq!((empty.bus_range, empty.children.len()), (Some((0x73, 0x73)), 0));

    let bus_c0 = &roots[6];
    let empties: Vec<&str> = bus_c0
        .children
        .iter()
        .filter(|c| c.bus_range.is_some() && c.children.is_empty())
        .map(|c| c.bdf_suffix.as_str())
        .collect();
    assert_eq!(empties, ["03.2-[c2]", "03.3-[c3]"]);
    let last = bus_c0.children.last().unwrap();
    assert_eq!(last.bdf.as_deref(), Some("0000:c0:07.1"));
    assert_eq!(
        last.children[1].description,
        "Advanced Micro Devices, Inc. [AMD] Device 14dc"
    );
}

/// Every device of the `-vvv` captures appears in the tree with the same description.
#[test]
fn lspci_tree_agrees_with_vvv() {
    let entries = lspci::tree_entries(&tree());
    for f in [CX7, GPU_IDLE, HIGHPOINT] {
        let d = one_device(f);
        let e = entries
            .iter()
            .find(|e| e.bdf == d.bdf)
            .unwrap_or_else(|| panic!("{}", d.bdf));
        let head = d.description.split(" (rev").next().unwrap();
        assert_eq!(e.description, head, "{f}");
    }
}

#[test]
fn lspci_tree_single_root_without_descriptions() {
    let text = "-[0000:00]-+-00.0\n           +-01.0-[01]----00.0\n           \\-1c.0-[02-03]--+-00.0\n                           \\-00.1\n";
    let roots = lspci::parse_tree(text).unwrap();
    assert_eq!(roots.len(), 1);
    let entries = lspci::tree_entries(&roots);
    let got: Vec<(&str, usize)> = entries
        .iter()
        .map(|e| (e.bdf.as_str(), e.ancestors.len()))
        .collect();
    assert_eq!(
        got,
        [
            ("0000:00:00.0", 0),
            ("0000:00:01.0", 0),
            ("0000:01:00.0", 1),
            ("0000:00:1c.0", 0),
            ("0000:02:00.0", 1),
            ("0000:02:00.1", 1),
        ]
    );
    assert!(entries.iter().all(|e| e.description.is_empty()));
}

fn tree_err(text: &str) -> xirang_host::parse::ParseError {
    match lspci::parse_tree(text) {
        Ok(t) => panic!("accepted: {t:?}"),
        Err(e) => e,
    }
}

#[test]
fn lspci_tree_errors_name_line_and_expectation() {
    let e = tree_err("");
    assert_eq!((e.format, e.line), ("lspci -tv", 0));

    let e = tree_err("00:00.0 Host bridge: AMD\n");
    assert_eq!(e.line, 1);
    assert!(e.expected.contains("starting with `-[`"), "{e}");

    let good = "-[0000:00]-+-00.0  Host bridge\n           +-01.1-[01]--+-00.0  GPU\n";
    lspci::parse_tree(good).unwrap();
    // A continuation drawn at a column where no bus is open.
    let e = tree_err(&format!("{good}     +-02.0  Stray\n"));
    assert_eq!(e.line, 3);
    assert!(e.expected.contains("under an open `+-`"), "{e}");
    assert!(e.expected.contains("column 6"), "{e}");

    let e = tree_err("-[0000:00]-+-0g.0  Bad\n");
    assert!(e.expected.contains("device number"), "{e}");
    let e = tree_err("-[0000:00]-+-00.0-[1x]--\n");
    assert!(e.expected.contains("secondary bus number"), "{e}");
    let e = tree_err("-[0000:00]-+-00.0-[01]\n");
    assert!(e.expected.contains("`]-`"), "{e}");
    let e = tree_err("-+-00.0  No root bus\n");
    assert!(e.expected.contains("root bus"), "{e}");
    let e = tree_err("-[0000:00]-*-00.0\n");
    assert!(e.expected.contains("branch"), "{e}");
    let e = tree_err("-[0000:00]-+-20.0\n");
    assert!(e.expected.contains("00.0-1f.7"), "{e}");
}
