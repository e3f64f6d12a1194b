#![cfg(not(loom))]
//! The verbs backend's hand-written layouts against rdma-core's real header: a C program
//! compiled against `infiniband/verbs.h` prints every offset, size and constant that
//! `xirang_memreg::verbs` uses, and each must match. Needs a C compiler and
//! libibverbs-dev (scripts/install-test-deps.sh installs it).

use std::collections::BTreeMap;
use std::process::Command;

const HEADER: &str = "/usr/include/infiniband/verbs.h";

const C_EXPRS: &[(&str, &str)] = &[
    ("qp_attr_qp_state", "offsetof(struct ibv_qp_attr, qp_state)"),
    ("cap_max_send_wr", "offsetof(struct ibv_qp_cap, max_send_wr)"),
    ("cap_max_recv_wr", "offsetof(struct ibv_qp_cap, max_recv_wr)"),
    ("cap_max_send_sge", "offsetof(struct ibv_qp_cap, max_send_sge)"),
    ("cap_max_recv_sge", "offsetof(struct ibv_qp_cap, max_recv_sge)"),
    (
        "cap_max_inline_data",
        "offsetof(struct ibv_qp_cap, max_inline_data)",
    ),
    ("qp_attr_path_mtu", "offsetof(struct ibv_qp_attr, path_mtu)"),
    ("qp_attr_rq_psn", "offsetof(struct ibv_qp_attr, rq_psn)"),
    ("qp_attr_sq_psn", "offsetof(struct ibv_qp_attr, sq_psn)"),
    ("qp_attr_dest_qp_num", "offsetof(struct ibv_qp_attr, dest_qp_num)"),
    (
        "qp_attr_qp_access_flags",
        "offsetof(struct ibv_qp_attr, qp_access_flags)",
    ),
    (
        "qp_attr_max_dest_rd_atomic",
        "offsetof(struct ibv_qp_attr, max_dest_rd_atomic)",
    ),
    (
        "qp_attr_min_rnr_timer",
        "offsetof(struct ibv_qp_attr, min_rnr_timer)",
    ),
    ("qp_attr_timeout", "offsetof(struct ibv_qp_attr, timeout)"),
    ("qp_attr_retry_cnt", "offsetof(struct ibv_qp_attr, retry_cnt)"),
    ("ah_dgid", "offsetof(struct ibv_ah_attr, grh.dgid)"),
    ("ah_sgid_index", "offsetof(struct ibv_ah_attr, grh.sgid_index)"),
    ("ah_hop_limit", "offsetof(struct ibv_ah_attr, grh.hop_limit)"),
    ("wr_wr_id", "offsetof(struct ibv_send_wr, wr_id)"),
    ("wr_next", "offsetof(struct ibv_send_wr, next)"),
    ("wr_sg_list", "offsetof(struct ibv_send_wr, sg_list)"),
    ("wr_num_sge", "offsetof(struct ibv_send_wr, num_sge)"),
    ("sge_addr", "offsetof(struct ibv_sge, addr)"),
    ("sge_length", "offsetof(struct ibv_sge, length)"),
    ("sge_lkey", "offsetof(struct ibv_sge, lkey)"),
    ("qp_init_send_cq", "offsetof(struct ibv_qp_init_attr, send_cq)"),
    ("qp_init_recv_cq", "offsetof(struct ibv_qp_init_attr, recv_cq)"),
    (
        "qp_init_sq_sig_all",
        "offsetof(struct ibv_qp_init_attr, sq_sig_all)",
    ),
    ("qp_context", "offsetof(struct ibv_qp, context)"),
    ("cq_context", "offsetof(struct ibv_cq, context)"),
    ("ctx_ops", "offsetof(struct ibv_context, ops)"),
    ("wc_wr_id", "offsetof(struct ibv_wc, wr_id)"),
    ("wc_vendor_err", "offsetof(struct ibv_wc, vendor_err)"),
    ("MTU_256", "IBV_MTU_256"),
    ("MTU_512", "IBV_MTU_512"),
    ("MTU_2048", "IBV_MTU_2048"),
    ("MTU_4096", "IBV_MTU_4096"),
    ("sizeof_gid", "sizeof(union ibv_gid)"),
    ("ctx_ops_poll_cq", "offsetof(struct ibv_context, ops.poll_cq)"),
    ("ctx_ops_post_send", "offsetof(struct ibv_context, ops.post_send)"),
    ("sizeof_ops", "sizeof(struct ibv_context_ops)"),
    ("mr_lkey", "offsetof(struct ibv_mr, lkey)"),
    ("mr_rkey", "offsetof(struct ibv_mr, rkey)"),
    ("qp_qp_num", "offsetof(struct ibv_qp, qp_num)"),
    ("qp_init_cap", "offsetof(struct ibv_qp_init_attr, cap)"),
    ("qp_init_qp_type", "offsetof(struct ibv_qp_init_attr, qp_type)"),
    ("sizeof_qp_init_attr", "sizeof(struct ibv_qp_init_attr)"),
    ("sizeof_ah_attr", "sizeof(struct ibv_ah_attr)"),
    ("ah_is_global", "offsetof(struct ibv_ah_attr, is_global)"),
    ("ah_port_num", "offsetof(struct ibv_ah_attr, port_num)"),
    ("qp_attr_cap", "offsetof(struct ibv_qp_attr, cap)"),
    ("qp_attr_ah_attr", "offsetof(struct ibv_qp_attr, ah_attr)"),
    ("qp_attr_pkey_index", "offsetof(struct ibv_qp_attr, pkey_index)"),
    (
        "qp_attr_max_rd_atomic",
        "offsetof(struct ibv_qp_attr, max_rd_atomic)",
    ),
    ("qp_attr_port_num", "offsetof(struct ibv_qp_attr, port_num)"),
    ("qp_attr_rnr_retry", "offsetof(struct ibv_qp_attr, rnr_retry)"),
    ("qp_attr_rate_limit", "offsetof(struct ibv_qp_attr, rate_limit)"),
    ("sizeof_qp_attr", "sizeof(struct ibv_qp_attr)"),
    ("sizeof_sge", "sizeof(struct ibv_sge)"),
    ("wr_opcode", "offsetof(struct ibv_send_wr, opcode)"),
    ("wr_send_flags", "offsetof(struct ibv_send_wr, send_flags)"),
    (
        "wr_rdma_remote_addr",
        "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)",
    ),
    ("wr_rdma_rkey", "offsetof(struct ibv_send_wr, wr.rdma.rkey)"),
    ("sizeof_send_wr", "sizeof(struct ibv_send_wr)"),
    ("wc_status", "offsetof(struct ibv_wc, status)"),
    ("wc_byte_len", "offsetof(struct ibv_wc, byte_len)"),
    ("sizeof_wc", "sizeof(struct ibv_wc)"),
    ("ACCESS_LOCAL_WRITE", "IBV_ACCESS_LOCAL_WRITE"),
    ("ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_WRITE"),
    ("ACCESS_REMOTE_READ", "IBV_ACCESS_REMOTE_READ"),
    ("QPT_RC", "IBV_QPT_RC"),
    ("QPS_INIT", "IBV_QPS_INIT"),
    ("QPS_RTR", "IBV_QPS_RTR"),
    ("QPS_RTS", "IBV_QPS_RTS"),
    ("QP_STATE", "IBV_QP_STATE"),
    ("QP_ACCESS_FLAGS", "IBV_QP_ACCESS_FLAGS"),
    ("QP_PKEY_INDEX", "IBV_QP_PKEY_INDEX"),
    ("QP_PORT", "IBV_QP_PORT"),
    ("QP_AV", "IBV_QP_AV"),
    ("QP_PATH_MTU", "IBV_QP_PATH_MTU"),
    ("QP_TIMEOUT", "IBV_QP_TIMEOUT"),
    ("QP_RETRY_CNT", "IBV_QP_RETRY_CNT"),
    ("QP_RNR_RETRY", "IBV_QP_RNR_RETRY"),
    ("QP_RQ_PSN", "IBV_QP_RQ_PSN"),
    ("QP_MAX_QP_RD_ATOMIC", "IBV_QP_MAX_QP_RD_ATOMIC"),
    ("QP_MIN_RNR_TIMER", "IBV_QP_MIN_RNR_TIMER"),
    ("QP_SQ_PSN", "IBV_QP_SQ_PSN"),
    ("QP_MAX_DEST_RD_ATOMIC", "IBV_QP_MAX_DEST_RD_ATOMIC"),
    ("QP_DEST_QPN", "IBV_QP_DEST_QPN"),
    ("WR_RDMA_WRITE", "IBV_WR_RDMA_WRITE"),
    ("WR_RDMA_READ", "IBV_WR_RDMA_READ"),
    ("SEND_SIGNALED", "IBV_SEND_SIGNALED"),
    ("WC_SUCCESS", "IBV_WC_SUCCESS"),
    ("MTU_1024", "IBV_MTU_1024"),
];

#[test]
fn layouts_match_the_rdma_core_header() {
    assert!(
        std::path::Path::new(HEADER).exists(),
        "{HEADER} missing: install libibverbs-dev (scripts/install-test-deps.sh does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("abi.c");
    let exe = dir.path().join("abi");
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for (name, expr) in C_EXPRS {
        c.push_str(&format!("  printf(\"{name} %zu\\n\", (size_t)({expr}));\n"));
    }
    c.push_str("  return 0;\n}\n");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling against {HEADER} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let c_side: BTreeMap<String, usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let rust_side = xirang_memreg::verbs::abi_layout();
    assert_eq!(
        rust_side.len(),
        C_EXPRS.len(),
        "every Rust fact has a C expression"
    );
    let mut wrong = Vec::new();
    for (name, value) in rust_side {
        let c = c_side
            .get(name)
            .unwrap_or_else(|| panic!("{name} not printed by the C side"));
        if *c != value {
            wrong.push(format!("{name}: Rust {value}, verbs.h {c}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "layouts differ from verbs.h:\n{}",
        wrong.join("\n")
    );
}

/// Without an RDMA device (this host has none; the guest test bed has rxe) the automatic
/// choice falls back to the host backend and says why.
#[test]
fn auto_backend_falls_back_with_a_reason() {
    let (backend, why) = xirang_memreg::verbs::auto_backend(Some("no-such-device-xyz"));
    assert_eq!(backend.name(), "host");
    assert!(why.contains("host backend"), "{why}");
    assert!(
        why.contains("no-such-device-xyz") || why.contains("libibverbs") || why.contains("ibv_"),
        "the reason names what is missing: {why}"
    );
}
