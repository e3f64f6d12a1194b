#!/usr/bin/env python3
"""Builds the healthy fixture cluster under test_data/cluster/ from the project's copies
of real captures (run from anywhere; writes next to this script):

- host trees: the sysfs layout of crates/xirang-host/test_data/sysfs (prometheus/procfs),
  with the mlx5 DCQCN knobs and hw_counter names of its eth0/mlx5_0 (real mlx5 defaults),
  the `mlnx_qos -i` output of crates/xirang-host/test_data/mlnx_qos (trust dscp, PFC on
  priority 3) and the ConnectX-4 Lx `ethtool -S` of crates/xirang-host/test_data/ethtool
  (no errors) as the captured command outputs, and a GID table laid out like the show_gids
  fixture (link-local v1/v2, then IPv4-mapped v1/v2);
- switch configs: SONiC's Mellanox SN4600C QoS and buffer tables from
  crates/xirang-switch/test_data/sonic, merged, with two changes a RoCE deployment makes
  (DSCP 26, RoCE data, to TC 3 and DSCP 48, CNP, to TC 6; PFC on priority 3 only, as the
  hosts) and a PORT and PFC_WD table added (SONiC defaults: MTU 9100; watchdog 200 ms, drop);
- topology.toml: which NIC plugs into which switch port; policy.toml.

8 hosts x 2 NICs (ConnectX-6 Dx, 100G RoCE) and 2 GPUs, each GPU and NIC pair behind one
PCIe switch, one pair per socket; NIC i of every host on leaf i+1 (two rails), leaf1 and
leaf2 joined by one link. Every rule of the audit passes on this cluster.
"""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "cluster")
HOST_DATA = os.path.join(HERE, "..", "..", "xirang-host", "test_data")
SONIC = os.path.join(HERE, "..", "..", "xirang-switch", "test_data", "sonic")
PROCFS = os.path.join(HOST_DATA, "sysfs", "procfs", "sys")

HOSTS = 8
# ConnectX-6 Dx at 100G with the firmware of the ibstat fixture in shared/fixtures/rdma-misc;
# 100G because the SN4600C-C64 buffer tables stop at 100G ports.
FW = "22.38.1002"
HCA = "MT4125"
BOARD = "MT_0000000359"
RATE = "100 Gb/sec (4X EDR)"
NIC_SPEED_MBPS = 100000
MTU = 9000
# Per socket s: root bus, switch upstream bus, downstream bus, GPU bus, NIC bus.
SOCKETS = [
    {"numa": 0, "cpus": "0-31", "root": 0x15, "up": 0x16, "down": 0x17, "gpu": 0x18, "nic": 0x19},
    {"numa": 1, "cpus": "32-63", "root": 0x95, "up": 0x96, "down": 0x97, "gpu": 0x98, "nic": 0x99},
]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def read(path):
    with open(path) as f:
        return f.read()


def pci_attrs(d, cls, vendor, device, numa, cpus, speed, width):
    write(f"{d}/class", f"{cls}\n")
    write(f"{d}/vendor", f"{vendor}\n")
    write(f"{d}/device", f"{device}\n")
    write(f"{d}/numa_node", f"{numa}\n")
    write(f"{d}/local_cpulist", f"{cpus}\n")
    for k in ("current", "max"):
        write(f"{d}/{k}_link_speed", f"{speed} GT/s PCIe\n")
        write(f"{d}/{k}_link_width", f"{width}\n")


def host(h):
    root = os.path.join(OUT, "hosts", f"h{h}")
    name = f"h{h}"
    write(f"{root}/etc/hostname", f"{name}\n")
    ecn_src = os.path.join(PROCFS, "class/net/eth0/ecn")
    counters_src = os.path.join(PROCFS, "class/infiniband/hfi1_0/ports/1/counters")
    hw_src = os.path.join(PROCFS, "class/infiniband/mlx5_0/ports/1/hw_counters")
    qos = read(os.path.join(HOST_DATA, "mlnx_qos", "mlnx_qos-trust-dscp-pfc-prio3.txt"))
    # A real mlx5 `ethtool -S` whose error and discard counters are all zero.
    ethtool = read(os.path.join(HOST_DATA, "ethtool", "mlx5-cx4lx-fw14.23-ubuntu18.04-ethtool-S.txt"))
    for i, s in enumerate(SOCKETS):
        rootc = f"pci0000:{s['root']:02x}"
        rp = f"0000:{s['root']:02x}:01.0"
        up = f"0000:{s['up']:02x}:00.0"
        dn_g = f"0000:{s['down']:02x}:00.0"
        dn_n = f"0000:{s['down']:02x}:01.0"
        gpu = f"0000:{s['gpu']:02x}:00.0"
        nic = f"0000:{s['nic']:02x}:00.0"
        base = f"{root}/sys/devices/{rootc}"
        chain = {rp: f"{base}/{rp}", up: f"{base}/{rp}/{up}", dn_g: f"{base}/{rp}/{up}/{dn_g}",
                 dn_n: f"{base}/{rp}/{up}/{dn_n}", gpu: f"{base}/{rp}/{up}/{dn_g}/{gpu}",
                 nic: f"{base}/{rp}/{up}/{dn_n}/{nic}"}
        for b in (rp, up, dn_g, dn_n):
            pci_attrs(chain[b], "0x060400", "0x1000" if b != rp else "0x8086", "0xc030", s["numa"], s["cpus"], "32.0", 16)
        pci_attrs(chain[gpu], "0x030200", "0x10de", "0x2330", s["numa"], s["cpus"], "32.0", 16)
        pci_attrs(chain[nic], "0x020000", "0x15b3", "0x101d", s["numa"], s["cpus"], "16.0", 16)
        for b, d in chain.items():
            rel = os.path.relpath(d, f"{root}/sys/bus/pci/devices")
            link(f"{root}/sys/bus/pci/devices/{b}", rel)
        dev = f"mlx5_{i}"
        ifname = f"ens{i + 1}np0"
        # The class entries are real directories here (as in the procfs fixture), with
        # `device` links to the PCI function.
        ib = f"{root}/sys/class/infiniband/{dev}"
        link(f"{ib}/device", os.path.relpath(chain[nic], ib))
        write(f"{ib}/fw_ver", f"{FW}\n")
        write(f"{ib}/hca_type", f"{HCA}\n")
        write(f"{ib}/board_id", f"{BOARD}\n")
        write(f"{ib}/node_type", "1: CA\n")
        write(f"{ib}/node_guid", f"b83f:d203:00{h:02x}:{i:04x}\n")
        write(f"{ib}/tc/1/traffic_class", "Global tclass=106\n")
        p = f"{ib}/ports/1"
        write(f"{p}/state", "4: ACTIVE\n")
        write(f"{p}/phys_state", "5: LinkUp\n")
        write(f"{p}/rate", f"{RATE}\n")
        write(f"{p}/link_layer", "Ethernet\n")
        ip = f"0000:0000:0000:0000:0000:ffff:0a0{i}:{h:04x}"
        ll = f"fe80:0000:0000:0000:ba3f:d2ff:fe{h:02x}:{i:04x}"
        for idx, (gid, kind) in enumerate([(ll, "IB/RoCE v1"), (ll, "RoCE v2"), (ip, "IB/RoCE v1"), (ip, "RoCE v2")]):
            write(f"{p}/gids/{idx}", f"{gid}\n")
            write(f"{p}/gid_attrs/types/{idx}", f"{kind}\n")
            write(f"{p}/gid_attrs/ndevs/{idx}", f"{ifname}\n")
        # Unused entries read as zeros.
        write(f"{p}/gids/4", "0000:0000:0000:0000:0000:0000:0000:0000\n")
        for c in sorted(os.listdir(counters_src)):
            write(f"{p}/counters/{c}", "0\n")
        for c in sorted(os.listdir(hw_src)):
            write(f"{p}/hw_counters/{c}", "10\n" if c == "lifespan" else "0\n")
        nd = f"{root}/sys/class/net/{ifname}"
        link(f"{nd}/device", os.path.relpath(chain[nic], nd))
        write(f"{nd}/mtu", f"{MTU}\n")
        write(f"{nd}/speed", f"{NIC_SPEED_MBPS}\n")
        write(f"{nd}/operstate", "up\n")
        write(f"{nd}/address", f"b8:3f:d2:{h:02x}:00:{i:02x}\n")
        for side in ("roce_np", "roce_rp"):
            for f in sorted(os.listdir(os.path.join(ecn_src, side))):
                src = os.path.join(ecn_src, side, f)
                if os.path.isdir(src):
                    # DCQCN on the RoCE priority (3) only, both sides.
                    for prio in range(8):
                        write(f"{nd}/ecn/{side}/enable/{prio}", "1\n" if prio == 3 else "0\n")
                else:
                    write(f"{nd}/ecn/{side}/{f}", read(src).strip() + "\n")
        write(f"{root}/commands/mlnx_qos-i-{ifname}.txt", qos)
        write(f"{root}/commands/ethtool-S-{ifname}.txt", ethtool)


def switch(n):
    cfg = {}
    for f in ("qos-mellanox4600c-c64.json", "buffers-mellanox4600c-t1.json"):
        cfg.update(json.load(open(os.path.join(SONIC, f))))
    ports = [f"Ethernet{4 * k}" for k in range(HOSTS + 1)]
    cfg["DEVICE_METADATA"] = {"localhost": {"hostname": f"leaf{n}", "hwsku": "Mellanox-SN4600C-C64"}}
    cfg["PORT"] = {p: {"admin_status": "up", "speed": str(NIC_SPEED_MBPS), "mtu": "9100", "fec": "rs", "alias": p}
                   for p in ports}
    cfg["DSCP_TO_TC_MAP"]["AZURE"]["26"] = "3"
    cfg["DSCP_TO_TC_MAP"]["AZURE"]["48"] = "6"
    qmap = {}
    for p in ports:
        m = dict(cfg["PORT_QOS_MAP"].get("Ethernet0", {}))
        m["dscp_to_tc_map"] = "AZURE"
        m["pfc_enable"] = "3"
        m["pfcwd_sw_enable"] = "3"
        qmap[p] = m
    qmap["global"] = {"dscp_to_tc_map": "AZURE"}
    cfg["PORT_QOS_MAP"] = qmap
    cfg["QUEUE"] = {f"{p}|3": {"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"} for p in ports}
    cfg["QUEUE"].update({f"{p}|6": {"scheduler": "scheduler.0"} for p in ports})
    # SONiC's buffer manager generates the lossless PG profile from pg_profile_lookup.ini
    # (speed, cable length -> size, xon, xoff, threshold); this is the 100G/5m row.
    speed, cable, size, xon, xoff, th = lookup_row(str(NIC_SPEED_MBPS), "5m")
    name = f"pg_lossless_{speed}_{cable}_profile"
    cfg["BUFFER_PROFILE"][name] = {"pool": "ingress_lossless_pool", "size": size, "xon": xon, "xoff": xoff,
                                   "dynamic_th": th}
    cfg["CABLE_LENGTH"]["AZURE"] = {p: "5m" for p in ports}
    cfg["BUFFER_PG"] = {f"{p}|3": {"profile": name} for p in ports}
    cfg["BUFFER_PG"].update({f"{p}|0": {"profile": "ingress_lossy_profile"} for p in ports})
    cfg["PFC_WD"] = {"GLOBAL": {"POLL_INTERVAL": "200"}}
    cfg["PFC_WD"].update({p: {"action": "drop", "detection_time": "200", "restoration_time": "200"} for p in ports})
    write(os.path.join(OUT, "switches", f"leaf{n}.json"), json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def lookup_row(speed, cable):
    for line in open(os.path.join(SONIC, "pg_profile_lookup-mellanox-sn4600c.ini")):
        f = line.split()
        if len(f) == 6 and f[0] == speed and f[1] == cable:
            return f
    raise SystemExit(f"no {speed}/{cable} row in pg_profile_lookup")


def topology():
    lines = ["# Cabling of the fixture cluster: NIC i of every host on leaf i+1, port 4*(host-1).",
             "", "[switches]", 'leaf1 = "leaf"', 'leaf2 = "leaf"', ""]
    for h in range(1, HOSTS + 1):
        for i in range(2):
            lines += ["[[link]]", f'host = "h{h}"', f'nic = "mlx5_{i}"', f'switch = "leaf{i + 1}"',
                      f'port = "Ethernet{4 * (h - 1)}"', ""]
    lines += ["[[link]]", 'switch = "leaf1"', f'port = "Ethernet{4 * HOSTS}"', 'peer_switch = "leaf2"',
              f'peer_port = "Ethernet{4 * HOSTS}"', ""]
    write(os.path.join(OUT, "topology.toml"), "\n".join(lines))


def policy():
    write(os.path.join(OUT, "policy.toml"), f"""# What this cluster should run (xirang audit --policy).
roce_priority = 3
roce_dscp = 26
mtu_bytes = {MTU}

[[firmware]]
hca_type = "{HCA}"
allowed = ["{FW}", "22.39.1002"]
""")


if __name__ == "__main__":
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    for h in range(1, HOSTS + 1):
        host(h)
    for n in (1, 2):
        switch(n)
    topology()
    policy()
