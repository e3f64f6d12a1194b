//! The `verbs` backend: libibverbs loaded at run time, so the binary starts (and falls
//! back to the `host` backend) on machines without rdma-core or an RDMA device.
//!
//! Only what a registered buffer pool and its own test need is bound: devices, protection
//! domains, `ibv_reg_mr`/`ibv_dereg_mr`, `ibv_reg_dmabuf_mr` where the library has it,
//! completion queues and RC queue pairs with RDMA WRITE/READ
//! (docs/reference/memory-registration.md §1). The struct layouts mirror rdma-core's
//! `infiniband/verbs.h` (stable since ABI 1.1); `tests/verbs_abi.rs` compiles a C program
//! against the real header and compares every offset and constant used here.
//!
//! `ibv_post_send` and `ibv_poll_cq` are inline functions in the header that call through
//! the context's operation table, so they are called the same way here.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::MemregError;
use crate::region::{Access, Backend, Keys};

// `SendWr` keeps the work request's unions as 64-bit words (the rkey in the low half of
// the second): true of the 64-bit little-endian Linux targets rdma-core ships for
// (x86-64, arm64); anything else would need its own layout.
#[cfg(not(all(target_pointer_width = "64", target_endian = "little")))]
compile_error!("the verbs layouts are written for 64-bit little-endian targets");

/// The library's soname (Debian `libibverbs1`).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

// Constants from verbs.h; tests/verbs_abi.rs checks each against the header.
/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: c_int = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: c_int = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: c_int = 1 << 2;
/// `IBV_QPT_RC`.
pub const QPT_RC: u32 = 2;
/// `IBV_QPS_INIT`.
pub const QPS_INIT: u32 = 1;
/// `IBV_QPS_RTR`.
pub const QPS_RTR: u32 = 2;
/// `IBV_QPS_RTS`.
pub const QPS_RTS: u32 = 3;
/// `IBV_QP_STATE`.
pub const QP_STATE: c_int = 1;
/// `IBV_QP_ACCESS_FLAGS`.
pub const QP_ACCESS_FLAGS: c_int = 1 << 3;
/// `IBV_QP_PKEY_INDEX`.
pub const QP_PKEY_INDEX: c_int = 1 << 4;
/// `IBV_QP_PORT`.
pub const QP_PORT: c_int = 1 << 5;
/// `IBV_QP_AV`.
pub const QP_AV: c_int = 1 << 7;
/// `IBV_QP_PATH_MTU`.
pub const QP_PATH_MTU: c_int = 1 << 8;
/// `IBV_QP_TIMEOUT`.
pub const QP_TIMEOUT: c_int = 1 << 9;
/// `IBV_QP_RETRY_CNT`.
pub const QP_RETRY_CNT: c_int = 1 << 10;
/// `IBV_QP_RNR_RETRY`.
pub const QP_RNR_RETRY: c_int = 1 << 11;
/// `IBV_QP_RQ_PSN`.
pub const QP_RQ_PSN: c_int = 1 << 12;
/// `IBV_QP_MAX_QP_RD_ATOMIC`.
pub const QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
/// `IBV_QP_MIN_RNR_TIMER`.
pub const QP_MIN_RNR_TIMER: c_int = 1 << 15;
/// `IBV_QP_SQ_PSN`.
pub const QP_SQ_PSN: c_int = 1 << 16;
/// `IBV_QP_MAX_DEST_RD_ATOMIC`.
pub const QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
/// `IBV_QP_DEST_QPN`.
pub const QP_DEST_QPN: c_int = 1 << 20;
/// `IBV_WR_RDMA_WRITE`.
pub const WR_RDMA_WRITE: u32 = 0;
/// `IBV_WR_RDMA_READ`.
pub const WR_RDMA_READ: u32 = 4;
/// `IBV_SEND_SIGNALED`.
pub const SEND_SIGNALED: u32 = 1 << 1;
/// `IBV_WC_SUCCESS`.
pub const WC_SUCCESS: u32 = 0;
/// `IBV_MTU_256`.
pub const MTU_256: u32 = 1;
/// `IBV_MTU_512`.
pub const MTU_512: u32 = 2;
/// `IBV_MTU_1024`: the path MTU a 1500-byte Ethernet netdev carries for RoCE.
pub const MTU_1024: u32 = 3;
/// `IBV_MTU_2048`.
pub const MTU_2048: u32 = 4;
/// `IBV_MTU_4096`.
pub const MTU_4096: u32 = 5;
/// Index of `post_send` in `struct ibv_context_ops`.
pub const OPS_POST_SEND: usize = 25;
/// Index of `poll_cq` in `struct ibv_context_ops`.
pub const OPS_POLL_CQ: usize = 11;
/// Entries in `struct ibv_context_ops`.
const OPS_LEN: usize = 32;

/// `union ibv_gid` (8-byte aligned through its `global` view).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gid {
    /// The 16 bytes.
    pub raw: [u8; 16],
}

/// `struct ibv_context`, up to the operation table (the rest is never read).
#[repr(C)]
pub struct IbvContext {
    /// `device`.
    pub device: *mut c_void,
    /// `ops`: function pointers.
    pub ops: [*mut c_void; OPS_LEN],
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    /// `context`.
    pub context: *mut IbvContext,
    /// `pd`.
    pub pd: *mut c_void,
    /// `addr`.
    pub addr: *mut c_void,
    /// `length`.
    pub length: usize,
    /// `handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// `struct ibv_cq`, its first field only.
#[repr(C)]
pub struct IbvCq {
    /// `context`.
    pub context: *mut IbvContext,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
pub struct IbvQp {
    /// `context`.
    pub context: *mut IbvContext,
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `pd`.
    pub pd: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`.
    pub recv_cq: *mut IbvCq,
    /// `srq`.
    pub srq: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `qp_num`.
    pub qp_num: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QpCap {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct QpInitAttr {
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`.
    pub recv_cq: *mut IbvCq,
    /// `srq`.
    pub srq: *mut c_void,
    /// `cap`.
    pub cap: QpCap,
    /// `qp_type`.
    pub qp_type: u32,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalRoute {
    /// `dgid`.
    pub dgid: Gid,
    /// `flow_label`.
    pub flow_label: u32,
    /// `sgid_index`.
    pub sgid_index: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `traffic_class`.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AhAttr {
    /// `grh`.
    pub grh: GlobalRoute,
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
    /// `src_path_bits`.
    pub src_path_bits: u8,
    /// `static_rate`.
    pub static_rate: u8,
    /// `is_global`.
    pub is_global: u8,
    /// `port_num`.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QpAttr {
    /// `qp_state`.
    pub qp_state: u32,
    /// `cur_qp_state`.
    pub cur_qp_state: u32,
    /// `path_mtu`.
    pub path_mtu: u32,
    /// `path_mig_state`.
    pub path_mig_state: u32,
    /// `qkey`.
    pub qkey: u32,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `qp_access_flags`.
    pub qp_access_flags: u32,
    /// `cap`.
    pub cap: QpCap,
    /// `ah_attr`.
    pub ah_attr: AhAttr,
    /// `alt_ah_attr`.
    pub alt_ah_attr: AhAttr,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `alt_pkey_index`.
    pub alt_pkey_index: u16,
    /// `en_sqd_async_notify`.
    pub en_sqd_async_notify: u8,
    /// `sq_draining`.
    pub sq_draining: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `port_num`.
    pub port_num: u8,
    /// `timeout`.
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `alt_port_num`.
    pub alt_port_num: u8,
    /// `alt_timeout`.
    pub alt_timeout: u8,
    /// `rate_limit`.
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Sge {
    /// `addr`.
    pub addr: u64,
    /// `length`.
    pub length: u32,
    /// `lkey`.
    pub lkey: u32,
}

/// `struct ibv_send_wr`. The unions are kept as words: `wr.rdma` is `remote_addr` in
/// `wr[0]` and `rkey` in the low half of `wr[1]`; the rest is zero for RDMA operations.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SendWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut SendWr,
    /// `sg_list`.
    pub sg_list: *mut Sge,
    /// `num_sge`.
    pub num_sge: c_int,
    /// `opcode`.
    pub opcode: u32,
    /// `send_flags`.
    pub send_flags: u32,
    /// `imm_data` / `invalidate_rkey`.
    pub imm_data: u32,
    /// `wr` (union of rdma, atomic, ud).
    pub wr: [u64; 4],
    /// `qp_type` (union with `xrc.remote_srqn`), padded.
    pub qp_type: [u32; 2],
    /// The `bind_mw` / `tso` union.
    pub tail: [u64; 6],
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Wc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status`.
    pub status: u32,
    /// `opcode`.
    pub opcode: u32,
    /// `vendor_err`.
    pub vendor_err: u32,
    /// `byte_len`.
    pub byte_len: u32,
    /// `imm_data`.
    pub imm_data: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `src_qp`.
    pub src_qp: u32,
    /// `wc_flags`.
    pub wc_flags: u32,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `slid`.
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
}

type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut SendWr, *mut *mut SendWr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut Wc) -> c_int;

/// The library's entry points, resolved once.
#[allow(missing_docs)]
struct Fns {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    get_device_name: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    open_device: unsafe extern "C" fn(*mut c_void) -> *mut IbvContext,
    close_device: unsafe extern "C" fn(*mut IbvContext) -> c_int,
    alloc_pd: unsafe extern "C" fn(*mut IbvContext) -> *mut c_void,
    dealloc_pd: unsafe extern "C" fn(*mut c_void) -> c_int,
    reg_mr: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut IbvMr,
    dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    /// IBVERBS_1.12 (rdma-core 34); absent from older libraries.
    reg_dmabuf_mr: Option<unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut IbvMr>,
    create_cq: unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq,
    destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    create_qp: unsafe extern "C" fn(*mut c_void, *mut QpInitAttr) -> *mut IbvQp,
    modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut QpAttr, c_int) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    query_gid: unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut Gid) -> c_int,
}

// SAFETY: plain function pointers into a library that stays loaded for the process's life.
unsafe impl Send for Fns {}
// SAFETY: as above; libibverbs' entry points are thread-safe (ibv_reg_mr(3)).
unsafe impl Sync for Fns {}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn load() -> Result<Fns, String> {
    let name = CString::new(LIBIBVERBS).expect("no NUL in the soname");
    // SAFETY: dlopen with a valid C string; the handle is never closed, so every symbol
    // resolved from it stays valid.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!(
            "cannot load {LIBIBVERBS} ({}); install rdma-core's libibverbs1 and ibverbs-providers",
            dl_error()
        ));
    }
    // SAFETY: each name is the libibverbs function whose C prototype (verbs.h) the field's
    // type spells out; the handle is never closed.
    unsafe {
        Ok(Fns {
            get_device_list: resolve(h, "ibv_get_device_list")?,
            free_device_list: resolve(h, "ibv_free_device_list")?,
            get_device_name: resolve(h, "ibv_get_device_name")?,
            open_device: resolve(h, "ibv_open_device")?,
            close_device: resolve(h, "ibv_close_device")?,
            alloc_pd: resolve(h, "ibv_alloc_pd")?,
            dealloc_pd: resolve(h, "ibv_dealloc_pd")?,
            reg_mr: resolve(h, "ibv_reg_mr")?,
            dereg_mr: resolve(h, "ibv_dereg_mr")?,
            reg_dmabuf_mr: resolve(h, "ibv_reg_dmabuf_mr").ok(),
            create_cq: resolve(h, "ibv_create_cq")?,
            destroy_cq: resolve(h, "ibv_destroy_cq")?,
            create_qp: resolve(h, "ibv_create_qp")?,
            modify_qp: resolve(h, "ibv_modify_qp")?,
            destroy_qp: resolve(h, "ibv_destroy_qp")?,
            query_gid: resolve(h, "ibv_query_gid")?,
        })
    }
}

/// The symbol `name` of the library `h` as the function pointer type `F`.
///
/// # Safety
/// `h` is a live dlopen handle and `F` is a function pointer type matching the symbol's C
/// prototype. dlsym picks the symbol's default version (IBVERBS_1.1 for the classic verbs,
/// whose structs are the ones in this module).
unsafe fn resolve<F: Copy>(h: *mut c_void, name: &str) -> Result<F, String> {
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<*mut c_void>(),
        "a function pointer"
    );
    let c = CString::new(name).expect("no NUL in a symbol name");
    // SAFETY: a live handle and a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("{LIBIBVERBS} has no {name}: {}", dl_error()));
    }
    // SAFETY: F is a pointer-sized function pointer type matching the symbol (the caller's
    // contract), and p is non-null.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn lib() -> Result<&'static Fns, MemregError> {
    static LIB: OnceLock<Result<Fns, String>> = OnceLock::new();
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|e| MemregError::Verbs(e.clone()))
}

fn os_err(what: &str) -> MemregError {
    let e = std::io::Error::last_os_error();
    // libibverbs reports a kernel without the RDMA user interface as ENOSYS.
    if e.raw_os_error() == Some(libc::ENOSYS) {
        return MemregError::NoDevice(format!(
            "{what}: this kernel has no RDMA support loaded (no ib_uverbs)"
        ));
    }
    MemregError::Verbs(format!("{what}: {e}"))
}

/// The RDMA devices libibverbs sees, by name.
pub fn devices() -> Result<Vec<String>, MemregError> {
    let f = lib()?;
    let mut n: c_int = 0;
    // SAFETY: the out-parameter is a valid int; the list is freed below.
    let list = unsafe { (f.get_device_list)(&mut n) };
    if list.is_null() {
        return Err(os_err("ibv_get_device_list"));
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` device pointers; each name is a NUL-terminated string
        // owned by the device.
        let name = unsafe { CStr::from_ptr((f.get_device_name)(*list.add(i))) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: the list from ibv_get_device_list, freed once.
    unsafe { (f.free_device_list)(list) };
    Ok(names)
}

/// An open device with one protection domain: what registrations and queue pairs hang
/// off. Closed when the last handle drops.
#[derive(Debug)]
pub struct Device {
    name: String,
    ctx: *mut IbvContext,
    pd: *mut c_void,
}

// SAFETY: libibverbs objects may be used from any thread (rdma-core's verbs are
// thread-safe); the pointers are owned by this handle and freed once in Drop.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Device {
    /// Opens the device `name`, or the first device when `None`.
    pub fn open(name: Option<&str>) -> Result<Arc<Device>, MemregError> {
        let f = lib()?;
        let mut n: c_int = 0;
        // SAFETY: as in `devices`.
        let list = unsafe { (f.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(os_err("ibv_get_device_list"));
        }
        let mut found = None;
        let mut seen = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: as in `devices`.
            let dev = unsafe { *list.add(i) };
            // SAFETY: as in `devices`.
            let dn = unsafe { CStr::from_ptr((f.get_device_name)(dev)) }
                .to_string_lossy()
                .into_owned();
            if name.is_none_or(|w| w == dn) {
                found = Some((dev, dn));
                break;
            }
            seen.push(dn);
        }
        let Some((dev, dn)) = found else {
            // SAFETY: freed once.
            unsafe { (f.free_device_list)(list) };
            return Err(MemregError::NoDevice(match name {
                Some(w) => format!("no RDMA device {w} (devices: {})", seen.join(", ")),
                None => "no RDMA device".into(),
            }));
        };
        // SAFETY: a device from the live list; opening it keeps it valid after the list
        // is freed (ibv_get_device_list(3)).
        let ctx = unsafe { (f.open_device)(dev) };
        // SAFETY: freed once, after the open.
        unsafe { (f.free_device_list)(list) };
        if ctx.is_null() {
            return Err(os_err(&format!("ibv_open_device({dn})")));
        }
        // SAFETY: an open context.
        let pd = unsafe { (f.alloc_pd)(ctx) };
        if pd.is_null() {
            let e = os_err(&format!("ibv_alloc_pd({dn})"));
            // SAFETY: the context opened above, closed once.
            unsafe { (f.close_device)(ctx) };
            return Err(e);
        }
        Ok(Arc::new(Device { name: dn, ctx, pd }))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// GID `index` of `port`.
    pub fn gid(&self, port: u8, index: u32) -> Result<Gid, MemregError> {
        let f = lib()?;
        let mut g = Gid::default();
        // SAFETY: an open context and a valid out-parameter of the header's layout.
        if unsafe { (f.query_gid)(self.ctx, port, index as c_int, &mut g) } != 0 {
            return Err(os_err(&format!("ibv_query_gid({}, {port}, {index})", self.name)));
        }
        Ok(g)
    }

    /// Whether the device registers dma-buf memory (GPU memory exported by its driver),
    /// probed as NCCL does: `ibv_reg_dmabuf_mr` with fd -1 fails with EBADF when the path
    /// exists and with EOPNOTSUPP/EPROTONOSUPPORT when it does not
    /// (docs/reference/memory-registration.md §4).
    pub fn dmabuf_supported(&self) -> bool {
        let Ok(f) = lib() else { return false };
        let Some(reg) = f.reg_dmabuf_mr else {
            return false;
        };
        // SAFETY: fd -1 is never a valid dma-buf, so nothing is registered; a non-null
        // result is deregistered at once all the same.
        let mr = unsafe { reg(self.pd, 0, 0, 0, -1, 0) };
        if !mr.is_null() {
            // SAFETY: the registration just made.
            unsafe { (f.dereg_mr)(mr) };
            return true;
        }
        let errno = std::io::Error::last_os_error().raw_os_error();
        !matches!(errno, Some(libc::EOPNOTSUPP) | Some(libc::EPROTONOSUPPORT))
    }

    /// Registers `len` bytes of the dma-buf `fd` from `offset`, seen by the NIC at `iova`
    /// (same page offset as `offset`). Only local write, remote write and remote read are
    /// allowed here (ibv_reg_dmabuf_mr(3)).
    pub fn reg_dmabuf(
        self: &Arc<Self>,
        fd: c_int,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<Mr, MemregError> {
        let f = lib()?;
        let reg = f.reg_dmabuf_mr.ok_or_else(|| {
            MemregError::Verbs(format!("{LIBIBVERBS} predates ibv_reg_dmabuf_mr (rdma-core 34)"))
        })?;
        let flags = access_flags(access)?;
        // SAFETY: the caller's fd; the kernel validates it and the range.
        let mr = unsafe { reg(self.pd, offset, len, iova, fd, flags) };
        if mr.is_null() {
            return Err(os_err(&format!("ibv_reg_dmabuf_mr({}, fd {fd})", self.name)));
        }
        Ok(Mr {
            mr,
            _device: self.clone(),
        })
    }

    /// Registers `len` bytes at `addr` (`ibv_reg_mr`).
    fn reg(&self, addr: usize, len: usize, access: Access) -> Result<*mut IbvMr, MemregError> {
        let f = lib()?;
        let flags = access_flags(access)?;
        // SAFETY: the caller keeps the range mapped while it is registered.
        let mr = unsafe { (f.reg_mr)(self.pd, addr as *mut c_void, len, flags) };
        if mr.is_null() {
            return Err(MemregError::Register {
                backend: "verbs",
                len,
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(mr)
    }

    /// Registers and deregisters `len` bytes at `addr`, as a per-operation registration
    /// would; for the benchmark that a pool is measured against.
    pub fn register_once(&self, addr: usize, len: usize) -> Result<(), MemregError> {
        let mr = self.reg(addr, len, Access::ALL)?;
        // SAFETY: the registration just made, released once.
        if unsafe { (lib()?.dereg_mr)(mr) } != 0 {
            return Err(os_err("ibv_dereg_mr"));
        }
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Ok(f) = lib() {
            // SAFETY: the PD and context this handle owns; every MR, CQ and QP holds an
            // Arc to it, so none is left.
            unsafe {
                (f.dealloc_pd)(self.pd);
                (f.close_device)(self.ctx);
            }
        }
    }
}

/// The error a verbs call returned as its value: providers return errno either positive
/// or negated (rxe negates it).
fn errno_of(rc: c_int) -> std::io::Error {
    std::io::Error::from_raw_os_error(rc.saturating_abs())
}

fn access_flags(a: Access) -> Result<c_int, MemregError> {
    if a.remote_write && !a.local_write {
        return Err(MemregError::Access);
    }
    Ok((if a.local_write { ACCESS_LOCAL_WRITE } else { 0 })
        | (if a.remote_write { ACCESS_REMOTE_WRITE } else { 0 })
        | (if a.remote_read { ACCESS_REMOTE_READ } else { 0 }))
}

/// A registration outside a pool (a dma-buf); deregistered on drop.
#[derive(Debug)]
pub struct Mr {
    mr: *mut IbvMr,
    _device: Arc<Device>,
}

// SAFETY: owned pointer to a thread-safe verbs object, freed once.
unsafe impl Send for Mr {}
// SAFETY: read-only access to its keys.
unsafe impl Sync for Mr {}

impl Mr {
    /// Its keys.
    pub fn keys(&self) -> Keys {
        // SAFETY: a live registration.
        let m = unsafe { &*self.mr };
        Keys {
            lkey: m.lkey,
            rkey: m.rkey,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Ok(f) = lib() {
            // SAFETY: released once.
            unsafe { (f.dereg_mr)(self.mr) };
        }
    }
}

#[derive(Debug)]
struct MrPtr(*mut IbvMr);
// SAFETY: owned, freed once under the backend's lock.
unsafe impl Send for MrPtr {}

/// Registers regions with one device's protection domain (`ibv_reg_mr`).
#[derive(Debug)]
pub struct VerbsBackend {
    device: Arc<Device>,
    // Keyed by (address, length): a region registers once, so the pair is unique.
    mrs: Mutex<HashMap<(usize, usize), MrPtr>>,
    registrations: std::sync::atomic::AtomicU64,
}

impl VerbsBackend {
    /// A backend on `device`.
    pub fn new(device: Arc<Device>) -> VerbsBackend {
        VerbsBackend {
            device,
            mrs: Mutex::new(HashMap::new()),
            registrations: Default::default(),
        }
    }

    /// The device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// How many `ibv_reg_mr` calls it has made: a pool makes one per region, never one
    /// per buffer.
    pub fn registrations(&self) -> u64 {
        self.registrations.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Backend for VerbsBackend {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn register(&self, addr: usize, len: usize, access: Access) -> Result<Keys, MemregError> {
        let mr = self.device.reg(addr, len, access)?;
        self.registrations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: a live registration.
        let m = unsafe { &*mr };
        let keys = Keys {
            lkey: m.lkey,
            rkey: m.rkey,
        };
        self.mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((addr, len), MrPtr(mr));
        Ok(keys)
    }

    fn deregister(&self, addr: usize, len: usize, _keys: Keys) -> Result<(), MemregError> {
        let mr = self
            .mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(addr, len))
            .ok_or_else(|| MemregError::Verbs(format!("no registration of {len} bytes at {addr:#x}")))?;
        // SAFETY: the registration made for this range, removed from the map so it is
        // released once.
        if unsafe { (lib()?.dereg_mr)(mr.0) } != 0 {
            return Err(os_err("ibv_dereg_mr"));
        }
        Ok(())
    }
}

impl Drop for VerbsBackend {
    fn drop(&mut self) {
        // Regions deregister themselves; anything left is released here, before the
        // device closes.
        if let Ok(f) = lib() {
            for (_, mr) in self.mrs.get_mut().unwrap_or_else(|e| e.into_inner()).drain() {
                // SAFETY: released once.
                unsafe { (f.dereg_mr)(mr.0) };
            }
        }
    }
}

/// The backend a pool should use: `verbs` on `device` (or the first device) when
/// libibverbs loads and a device exists, else `host`, with the reason.
pub fn auto_backend(device: Option<&str>) -> (Arc<dyn Backend>, String) {
    match Device::open(device) {
        Ok(d) => {
            let msg = format!("verbs backend on {}", d.name());
            (Arc::new(VerbsBackend::new(d)), msg)
        }
        Err(e) => (
            Arc::new(crate::region::HostBackend::default()),
            format!("host backend, pinning with mlock only, because no RDMA device is usable: {e}"),
        ),
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    cq: *mut IbvCq,
    device: Arc<Device>,
}

// SAFETY: verbs objects are thread-safe; owned and destroyed once.
unsafe impl Send for Cq {}

impl Cq {
    /// A queue of `entries` completions on `device`.
    pub fn new(device: &Arc<Device>, entries: u32) -> Result<Cq, MemregError> {
        let f = lib()?;
        // SAFETY: an open context; no channel, vector 0.
        let cq = unsafe {
            (f.create_cq)(
                device.ctx,
                entries as c_int,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(os_err(&format!("ibv_create_cq({})", device.name)));
        }
        Ok(Cq {
            cq,
            device: device.clone(),
        })
    }

    /// Polls until `n` completions arrive or `timeout` passes; returns what arrived, or
    /// the error `ibv_poll_cq` reported.
    pub fn poll(&self, n: usize, timeout: Duration) -> Result<Vec<Wc>, MemregError> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let mut wc = [Wc::default(); 16];
        while out.len() < n && Instant::now() < deadline {
            // SAFETY: the context's poll_cq entry (verbs.h's inline ibv_poll_cq does the
            // same), called with this CQ and a buffer of 16 completions.
            let got = unsafe {
                let ctx = (*self.cq).context;
                let f: PollCqFn = std::mem::transmute((*ctx).ops[OPS_POLL_CQ]);
                f(self.cq, wc.len() as c_int, wc.as_mut_ptr())
            };
            if got < 0 {
                // ibv_poll_cq(3): a negative value is a failure, not an errno.
                return Err(MemregError::Verbs(format!(
                    "ibv_poll_cq on {} failed (returned {got})",
                    self.device.name
                )));
            }
            out.extend_from_slice(&wc[..got as usize]);
            if got == 0 {
                std::thread::yield_now();
            }
        }
        Ok(out)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Ok(f) = lib() {
            // SAFETY: destroyed once, after the QPs that use it (they hold no Arc to it,
            // so callers drop QPs first; `Qp` keeps its CQ alive by owning it).
            unsafe { (f.destroy_cq)(self.cq) };
        }
    }
}

/// What a peer needs to connect to a queue pair (exchanged out of band).
#[derive(Debug, Clone, Copy)]
pub struct QpInfo {
    /// Queue pair number.
    pub qpn: u32,
    /// Starting packet sequence number.
    pub psn: u32,
    /// Port GID.
    pub gid: Gid,
}

/// An RC queue pair with its own completion queue, for RDMA WRITE and READ.
#[derive(Debug)]
pub struct Qp {
    qp: *mut IbvQp,
    cq: Cq,
    port: u8,
    gid_index: u8,
}

// SAFETY: verbs objects are thread-safe; owned and destroyed once.
unsafe impl Send for Qp {}

/// Send queue depth of a [`Qp`].
pub const QP_DEPTH: u32 = 64;
/// RDMA READs a QP keeps in flight (initiator and responder).
const RD_ATOMIC: u8 = 4;
/// Local ACK timeout exponent: 4.096 µs x 2^14 = 67 ms, slack for emulated hosts.
const ACK_TIMEOUT_EXP: u8 = 14;
/// Transport retries before a QP errors.
const RETRY_COUNT: u8 = 7;
/// RNR retries (7 = infinite, ibv_modify_qp(3)).
const RNR_RETRY_INFINITE: u8 = 7;
/// Minimum RNR NAK timer code 12 (0.64 ms).
const MIN_RNR_TIMER: u8 = 12;

impl Qp {
    /// An RC queue pair on `device`'s `port`, addressed by GID `gid_index`.
    pub fn new(device: &Arc<Device>, port: u8, gid_index: u8) -> Result<Qp, MemregError> {
        let f = lib()?;
        let cq = Cq::new(device, QP_DEPTH * 2)?;
        let mut init = QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.cq,
            recv_cq: cq.cq,
            srq: std::ptr::null_mut(),
            cap: QpCap {
                max_send_wr: QP_DEPTH,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the device's PD and a valid init struct of the header's layout.
        let qp = unsafe { (f.create_qp)(device.pd, &mut init) };
        if qp.is_null() {
            return Err(os_err(&format!("ibv_create_qp({})", device.name)));
        }
        let q = Qp {
            qp,
            cq,
            port,
            gid_index,
        };
        let attr = QpAttr {
            qp_state: QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: (ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ) as u32,
            ..QpAttr::default()
        };
        q.modify(attr, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS, "INIT")?;
        Ok(q)
    }

    fn modify(&self, mut attr: QpAttr, mask: c_int, to: &str) -> Result<(), MemregError> {
        let f = lib()?;
        // SAFETY: a live QP and an attribute struct of the header's layout.
        let rc = unsafe { (f.modify_qp)(self.qp, &mut attr, mask) };
        if rc != 0 {
            return Err(MemregError::Verbs(format!(
                "ibv_modify_qp to {to}: {}",
                errno_of(rc)
            )));
        }
        Ok(())
    }

    /// What the peer needs to connect to this QP.
    pub fn info(&self) -> Result<QpInfo, MemregError> {
        let dev = &self.cq.device;
        // SAFETY: a live QP; qp_num is set at creation.
        let qpn = unsafe { (*self.qp).qp_num };
        Ok(QpInfo {
            qpn,
            // Any 24-bit start works; derived from the QPN so each side differs.
            psn: qpn.wrapping_mul(2_654_435_761) & 0x00ff_ffff,
            gid: dev.gid(self.port, u32::from(self.gid_index))?,
        })
    }

    /// Connects to `remote` (INIT -> RTR -> RTS) with path MTU `mtu` (an `IBV_MTU_*`).
    pub fn connect(&self, remote: &QpInfo, mtu: u32) -> Result<(), MemregError> {
        let local = self.info()?;
        let rtr = QpAttr {
            qp_state: QPS_RTR,
            path_mtu: mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: RD_ATOMIC,
            min_rnr_timer: MIN_RNR_TIMER,
            ah_attr: AhAttr {
                grh: GlobalRoute {
                    dgid: remote.gid,
                    sgid_index: self.gid_index,
                    hop_limit: 1,
                    ..GlobalRoute::default()
                },
                is_global: 1,
                port_num: self.port,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        self.modify(
            rtr,
            QP_STATE
                | QP_AV
                | QP_PATH_MTU
                | QP_DEST_QPN
                | QP_RQ_PSN
                | QP_MAX_DEST_RD_ATOMIC
                | QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        let rts = QpAttr {
            qp_state: QPS_RTS,
            timeout: ACK_TIMEOUT_EXP,
            retry_cnt: RETRY_COUNT,
            rnr_retry: RNR_RETRY_INFINITE,
            sq_psn: local.psn,
            max_rd_atomic: RD_ATOMIC,
            ..QpAttr::default()
        };
        self.modify(
            rts,
            QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Posts one signalled RDMA WRITE (`read == false`: `local` -> remote) or READ
    /// (remote -> `local`) of `local.length` bytes.
    ///
    /// # Safety
    /// `local` must lie in memory registered with its `lkey` on this QP's PD and stay valid
    /// (and, for a READ, unread by anyone else) until the completion arrives.
    pub unsafe fn post_rdma(
        &self,
        read: bool,
        wr_id: u64,
        local: Sge,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), MemregError> {
        let mut sge = local;
        let mut wr = SendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: if read { WR_RDMA_READ } else { WR_RDMA_WRITE },
            send_flags: SEND_SIGNALED,
            imm_data: 0,
            wr: [remote_addr, u64::from(rkey), 0, 0],
            qp_type: [0; 2],
            tail: [0; 6],
        };
        let mut bad: *mut SendWr = std::ptr::null_mut();
        // SAFETY: the context's post_send entry (verbs.h's inline ibv_post_send does the
        // same) with a live QP and a work request of the header's layout; the memory
        // contract is the caller's.
        let rc = unsafe {
            let ctx = (*self.qp).context;
            let f: PostSendFn = std::mem::transmute((*ctx).ops[OPS_POST_SEND]);
            f(self.qp, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(MemregError::Verbs(format!("ibv_post_send: {}", errno_of(rc))));
        }
        Ok(())
    }

    /// Polls this QP's completions (see [`Cq::poll`]).
    pub fn poll(&self, n: usize, timeout: Duration) -> Result<Vec<Wc>, MemregError> {
        self.cq.poll(n, timeout)
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if let Ok(f) = lib() {
            // SAFETY: destroyed once, before its CQ (a field, dropped after this body).
            unsafe { (f.destroy_qp)(self.qp) };
        }
    }
}

/// Layout facts the ABI test compares with the C header: `(name, value)`: every field
/// this module reads or writes, every size of a struct passed by pointer, every constant.
pub fn abi_layout() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    let ptr = size_of::<*mut c_void>();
    let grh = offset_of!(AhAttr, grh);
    vec![
        ("qp_attr_qp_state", offset_of!(QpAttr, qp_state)),
        ("cap_max_send_wr", offset_of!(QpCap, max_send_wr)),
        ("cap_max_recv_wr", offset_of!(QpCap, max_recv_wr)),
        ("cap_max_send_sge", offset_of!(QpCap, max_send_sge)),
        ("cap_max_recv_sge", offset_of!(QpCap, max_recv_sge)),
        ("cap_max_inline_data", offset_of!(QpCap, max_inline_data)),
        ("qp_attr_path_mtu", offset_of!(QpAttr, path_mtu)),
        ("qp_attr_rq_psn", offset_of!(QpAttr, rq_psn)),
        ("qp_attr_sq_psn", offset_of!(QpAttr, sq_psn)),
        ("qp_attr_dest_qp_num", offset_of!(QpAttr, dest_qp_num)),
        ("qp_attr_qp_access_flags", offset_of!(QpAttr, qp_access_flags)),
        (
            "qp_attr_max_dest_rd_atomic",
            offset_of!(QpAttr, max_dest_rd_atomic),
        ),
        ("qp_attr_min_rnr_timer", offset_of!(QpAttr, min_rnr_timer)),
        ("qp_attr_timeout", offset_of!(QpAttr, timeout)),
        ("qp_attr_retry_cnt", offset_of!(QpAttr, retry_cnt)),
        ("ah_dgid", grh + offset_of!(GlobalRoute, dgid)),
        ("ah_sgid_index", grh + offset_of!(GlobalRoute, sgid_index)),
        ("ah_hop_limit", grh + offset_of!(GlobalRoute, hop_limit)),
        ("wr_wr_id", offset_of!(SendWr, wr_id)),
        ("wr_next", offset_of!(SendWr, next)),
        ("wr_sg_list", offset_of!(SendWr, sg_list)),
        ("wr_num_sge", offset_of!(SendWr, num_sge)),
        ("sge_addr", offset_of!(Sge, addr)),
        ("sge_length", offset_of!(Sge, length)),
        ("sge_lkey", offset_of!(Sge, lkey)),
        ("qp_init_send_cq", offset_of!(QpInitAttr, send_cq)),
        ("qp_init_recv_cq", offset_of!(QpInitAttr, recv_cq)),
        ("qp_init_sq_sig_all", offset_of!(QpInitAttr, sq_sig_all)),
        ("qp_context", offset_of!(IbvQp, context)),
        ("cq_context", offset_of!(IbvCq, context)),
        ("ctx_ops", offset_of!(IbvContext, ops)),
        ("wc_wr_id", offset_of!(Wc, wr_id)),
        ("wc_vendor_err", offset_of!(Wc, vendor_err)),
        ("MTU_256", MTU_256 as usize),
        ("MTU_512", MTU_512 as usize),
        ("MTU_2048", MTU_2048 as usize),
        ("MTU_4096", MTU_4096 as usize),
        ("sizeof_gid", size_of::<Gid>()),
        ("ctx_ops_poll_cq", offset_of!(IbvContext, ops) + ptr * OPS_POLL_CQ),
        (
            "ctx_ops_post_send",
            offset_of!(IbvContext, ops) + ptr * OPS_POST_SEND,
        ),
        ("sizeof_ops", ptr * OPS_LEN),
        ("mr_lkey", offset_of!(IbvMr, lkey)),
        ("mr_rkey", offset_of!(IbvMr, rkey)),
        ("qp_qp_num", offset_of!(IbvQp, qp_num)),
        ("qp_init_cap", offset_of!(QpInitAttr, cap)),
        ("qp_init_qp_type", offset_of!(QpInitAttr, qp_type)),
        ("sizeof_qp_init_attr", size_of::<QpInitAttr>()),
        ("sizeof_ah_attr", size_of::<AhAttr>()),
        ("ah_is_global", offset_of!(AhAttr, is_global)),
        ("ah_port_num", offset_of!(AhAttr, port_num)),
        ("qp_attr_cap", offset_of!(QpAttr, cap)),
        ("qp_attr_ah_attr", offset_of!(QpAttr, ah_attr)),
        ("qp_attr_pkey_index", offset_of!(QpAttr, pkey_index)),
        ("qp_attr_max_rd_atomic", offset_of!(QpAttr, max_rd_atomic)),
        ("qp_attr_port_num", offset_of!(QpAttr, port_num)),
        ("qp_attr_rnr_retry", offset_of!(QpAttr, rnr_retry)),
        ("qp_attr_rate_limit", offset_of!(QpAttr, rate_limit)),
        ("sizeof_qp_attr", size_of::<QpAttr>()),
        ("sizeof_sge", size_of::<Sge>()),
        ("wr_opcode", offset_of!(SendWr, opcode)),
        ("wr_send_flags", offset_of!(SendWr, send_flags)),
        ("wr_rdma_remote_addr", offset_of!(SendWr, wr)),
        ("wr_rdma_rkey", offset_of!(SendWr, wr) + 8),
        ("sizeof_send_wr", size_of::<SendWr>()),
        ("wc_status", offset_of!(Wc, status)),
        ("wc_byte_len", offset_of!(Wc, byte_len)),
        ("sizeof_wc", size_of::<Wc>()),
        ("ACCESS_LOCAL_WRITE", ACCESS_LOCAL_WRITE as usize),
        ("ACCESS_REMOTE_WRITE", ACCESS_REMOTE_WRITE as usize),
        ("ACCESS_REMOTE_READ", ACCESS_REMOTE_READ as usize),
        ("QPT_RC", QPT_RC as usize),
        ("QPS_INIT", QPS_INIT as usize),
        ("QPS_RTR", QPS_RTR as usize),
        ("QPS_RTS", QPS_RTS as usize),
        ("QP_STATE", QP_STATE as usize),
        ("QP_ACCESS_FLAGS", QP_ACCESS_FLAGS as usize),
        ("QP_PKEY_INDEX", QP_PKEY_INDEX as usize),
        ("QP_PORT", QP_PORT as usize),
        ("QP_AV", QP_AV as usize),
        ("QP_PATH_MTU", QP_PATH_MTU as usize),
        ("QP_TIMEOUT", QP_TIMEOUT as usize),
        ("QP_RETRY_CNT", QP_RETRY_CNT as usize),
        ("QP_RNR_RETRY", QP_RNR_RETRY as usize),
        ("QP_RQ_PSN", QP_RQ_PSN as usize),
        ("QP_MAX_QP_RD_ATOMIC", QP_MAX_QP_RD_ATOMIC as usize),
        ("QP_MIN_RNR_TIMER", QP_MIN_RNR_TIMER as usize),
        ("QP_SQ_PSN", QP_SQ_PSN as usize),
        ("QP_MAX_DEST_RD_ATOMIC", QP_MAX_DEST_RD_ATOMIC as usize),
        ("QP_DEST_QPN", QP_DEST_QPN as usize),
        ("WR_RDMA_WRITE", WR_RDMA_WRITE as usize),
        ("WR_RDMA_READ", WR_RDMA_READ as usize),
        ("SEND_SIGNALED", SEND_SIGNALED as usize),
        ("WC_SUCCESS", WC_SUCCESS as usize),
        ("MTU_1024", MTU_1024 as usize),
    ]
}
