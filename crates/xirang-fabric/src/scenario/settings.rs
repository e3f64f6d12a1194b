//! Validation of `[config]` and `[tune]`: each setting's range and the settings against
//! each other (ECN thresholds, classes, transport, memory, DCQCN's firmware ranges), and
//! switch buffers against the built fabric.

use super::*;

impl Scenario {
    /// Every switch's buffer must hold what it sets aside: PFC headroom for each port (when
    /// PFC is on) and the reserved bytes of each port; otherwise the shared pool is empty and
    /// every packet beyond the reserve is dropped.
    pub(super) fn check_buffers(&self, fabric: &Fabric, at: &KeyPath, d: &mut Diagnostics) {
        let cfg = &self.config;
        for sw in &fabric.switches {
            // Saturating: sizes are bounded, but a sum that could wrap must never pass.
            let mut headroom = 0u64;
            let mut ports = 0u64;
            for p in sw.ports.iter().filter_map(|p| p.link) {
                let l = &fabric.links[p.index()];
                ports += 1;
                if cfg.pfc.enabled {
                    headroom =
                        headroom.saturating_add(cfg.pfc.headroom_bytes.unwrap_or_else(|| {
                            crate::config::default_headroom_bytes(l.rate_gbps, l.delay_ns)
                        }));
                }
            }
            let aside = headroom.saturating_add(ports.saturating_mul(cfg.buffer.reserved_bytes));
            if aside >= cfg.buffer.switch_bytes {
                d.error(
                    at,
                    format!(
                        "{} bytes cannot hold what switch `{}` sets aside: {headroom} bytes of PFC headroom and {} \
                         reserved for its {ports} ports; expected more than {aside} bytes",
                        cfg.buffer.switch_bytes,
                        sw.name,
                        ports.saturating_mul(cfg.buffer.reserved_bytes)
                    ),
                );
                return;
            }
        }
    }

    pub(super) fn validate_tune(&self, tiers: &[Tier], at: &KeyPath, d: &mut Diagnostics) {
        use crate::tune::{ParamKind, param_kind};
        let t = &self.tune;
        for (k, v, max) in [
            ("budget", t.budget, crate::tune::MAX_BUDGET),
            ("search_seeds", t.search_seeds, crate::tune::MAX_SEEDS),
            ("held_out_seeds", t.held_out_seeds, crate::tune::MAX_SEEDS),
        ] {
            if !(1..=max).contains(&v) {
                d.error(&at.key(k), format!("expected 1..={max}, found {v}"));
            }
        }
        if t.algorithms.is_empty() {
            d.error(
                &at.key("algorithms"),
                "expected at least one algorithm".to_string(),
            );
        }
        for (i, a) in t.algorithms.iter().enumerate() {
            if !crate::tune::SEARCHABLE_ALGORITHMS.contains(a) {
                d.error(
                    &at.key("algorithms").index(i),
                    format!(
                        "`{}`: expected one of {}",
                        a.as_str(),
                        crate::tune::SEARCHABLE_ALGORITHMS.map(|a| a.as_str()).join(", ")
                    ),
                );
            }
        }
        if !(0.0..=1.0).contains(&t.max_pause_ratio) {
            d.error(
                &at.key("max_pause_ratio"),
                format!(
                    "expected a share between 0 and 1, found {}",
                    limits::Num(t.max_pause_ratio)
                ),
            );
        }
        for (class, w) in &t.weights {
            if !self.config.classes.contains_key(class) {
                d.error(
                    &at.key("weights").key(class),
                    unknown_name(
                        "traffic class",
                        class,
                        self.config.classes.keys().map(String::as_str),
                    ),
                );
            } else if !(w.is_finite() && *w >= 0.0) {
                d.error(
                    &at.key("weights").key(class),
                    format!("expected a weight >= 0, found {w}"),
                );
            }
        }
        for (class, tol) in &t.guardrails {
            if !self.config.classes.contains_key(class) {
                d.error(
                    &at.key("guardrails").key(class),
                    unknown_name(
                        "traffic class",
                        class,
                        self.config.classes.keys().map(String::as_str),
                    ),
                );
            } else if !(tol.is_finite() && (0.0..=1.0).contains(tol)) {
                d.error(
                    &at.key("guardrails").key(class),
                    format!(
                        "expected a tolerance between 0 and 1 (0.01 = 1 % worse than the vendor at most), found {}",
                        limits::Num(*tol)
                    ),
                );
            }
        }
        // A range is judged against `[config]`; when that has problems of its own they
        // are reported, and no range can be judged against it.
        let config_valid = {
            let mut base = Diagnostics::default();
            self.config.validate(&KeyPath::root(), &mut base);
            base.error_count() == 0
        };
        for (i, p) in t.params.iter().enumerate() {
            let pat = at.key("param").index(i);
            match param_kind(&self.config, tiers, &p.name) {
                Err(e) => d.error(&pat.key("name"), e),
                Ok(ParamKind::Algorithm) => {
                    if p.min.is_some() || p.max.is_some() || p.log {
                        d.error(&pat, "an algorithm takes `choices`, not min/max/log".to_string());
                    }
                    for c in &p.choices {
                        if !crate::tune::SEARCHABLE_ALGORITHMS.iter().any(|a| a.as_str() == c) {
                            d.error(
                                &pat.key("choices"),
                                format!(
                                    "`{c}`: expected one of {}",
                                    crate::tune::SEARCHABLE_ALGORITHMS.map(|a| a.as_str()).join(", ")
                                ),
                            );
                        }
                    }
                }
                Ok(kind) => match (p.min, p.max) {
                    (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() && lo < hi => {
                        if config_valid {
                            self.validate_tune_range(tiers, &p.name, kind, (lo, hi), &pat, d);
                        }
                        if p.log && lo <= 0.0 {
                            d.error(
                                &pat.key("min"),
                                format!("a log-scale range needs min > 0, found {lo}"),
                            );
                        }
                        if !p.choices.is_empty() {
                            d.error(
                                &pat.key("choices"),
                                "a numeric parameter takes min and max, not choices".to_string(),
                            );
                        }
                    }
                    _ => d.error(&pat, format!("`{}`: expected numbers min < max", p.name)),
                },
            }
        }
    }
}

/// Integer ranges at most this wide are checked value by value (a priority range that
/// takes in the CNP's priority); wider ones, and real ranges, at their ends.
const TUNE_RANGE_CHECKED_WHOLE: f64 = 256.0;

impl Scenario {
    /// Every configuration a tune range can produce must be one the scenario could
    /// have given: each end (and each value of a small integer range) is set on the
    /// configuration and checked as `[config]` is, and the first problem is reported at
    /// the range's end in the knob's own words.
    fn validate_tune_range(
        &self,
        tiers: &[Tier],
        name: &str,
        kind: crate::tune::ParamKind,
        (lo, hi): (f64, f64),
        pat: &KeyPath,
        d: &mut Diagnostics,
    ) {
        let mut values = vec![("min", lo), ("max", hi)];
        if kind == crate::tune::ParamKind::Integer && hi - lo <= TUNE_RANGE_CHECKED_WHOLE {
            values.extend((lo.ceil() as i64..=hi.floor() as i64).map(|v| ("value in the range", v as f64)));
        }
        for (end, v) in values {
            if name.ends_with(".kmax_ratio") {
                // A real range: only its ends are tried.
                if v < 1.0 {
                    d.error(
                        &pat.key(end),
                        format!(
                            "`{name}` = {} ({end}): expected a ratio >= 1 (Kmax at least Kmin), found {}",
                            limits::Num(v),
                            limits::Num(v)
                        ),
                    );
                    return;
                }
                continue;
            }
            let problem = match crate::tune::apply(
                &self.config,
                tiers,
                &[(name.to_string(), crate::tune::ParamValue::Number(v))],
            ) {
                Err(e) => Some(e),
                Ok(c) => {
                    let mut dd = Diagnostics::default();
                    c.validate(&KeyPath::root(), &mut dd);
                    // Only the knob's own rules: a rule tying it to another setting
                    // (Kmin to Kmax, t_high to t_low) holds on the combination the
                    // search tries, not on the scenario's value of the other, and Kmax
                    // follows Kmin when the tier's kmax_ratio (or Kmax) is tuned too.
                    let tier = name.strip_suffix(".kmin_bytes");
                    let kmax_tuned = tier.is_some_and(|t| {
                        self.tune.params.iter().any(|q| {
                            q.name == format!("{t}.kmax_ratio") || q.name == format!("{t}.kmax_bytes")
                        })
                    });
                    dd.finish(None)
                        .into_iter()
                        .filter(|x| x.severity == crate::diag::Severity::Error)
                        .filter(|x| x.path.to_string() == name)
                        .find(|x| !(kmax_tuned && x.message.contains("kmax")))
                        .map(|x| x.keyed())
                }
            };
            if let Some(m) = problem {
                let at = match end {
                    "min" | "max" => pat.key(end),
                    _ => pat.clone(),
                };
                let m = match m.strip_prefix(&format!("{name}: ")) {
                    Some(own) => format!("`{name}` = {} ({end}): {own}", limits::Num(v)),
                    None => format!(
                        "`{name}` = {} ({end}) makes the configuration invalid: {m}",
                        limits::Num(v)
                    ),
                };
                d.error(&at, m);
                return;
            }
        }
    }
}

impl FabricConfig {
    /// Checks ranges and consistency of the configuration.
    pub fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        self.validate_switching(at, d);
        self.validate_classes(at, d);
        self.validate_transport(at, d);
        self.validate_memory(at, d);
        self.nccl.validate(&at.key("nccl"), d);
    }

    /// MTUs, PFC, ECN scaling and the switch buffer.
    fn validate_switching(&self, at: &KeyPath, d: &mut Diagnostics) {
        for (key, m) in [
            ("nic_bytes", self.mtu.nic_bytes),
            ("switch_bytes", self.mtu.switch_bytes),
        ] {
            if !(MIN_MTU_BYTES..=MAX_MTU_BYTES).contains(&m) {
                d.error(
                    &at.key("mtu").key(key),
                    format!("expected an MTU of {MIN_MTU_BYTES}..={MAX_MTU_BYTES} bytes, found {m}"),
                );
            }
        }
        if self.mtu.switch_bytes < self.mtu.nic_bytes {
            d.warning(
                &at.key("mtu").key("switch_bytes"),
                format!(
                    "switch MTU {} is below the host MTU {}: full-size frames will be dropped",
                    self.mtu.switch_bytes, self.mtu.nic_bytes
                ),
            );
        }
        let pfc = at.key("pfc");
        for (i, p) in self.pfc.priorities.iter().enumerate() {
            if *p > 7 {
                d.error(
                    &pfc.key("priorities").index(i),
                    format!("expected a priority 0..7, found {p}"),
                );
            }
        }
        if self.pfc.pause_quanta == 0 {
            d.error(
                &pfc.key("pause_quanta"),
                "expected a pause time >= 1 quantum (0 means resume), found 0".to_string(),
            );
        }
        if !(-8..=8).contains(&self.pfc.dynamic_th) {
            d.error(
                &pfc.key("dynamic_th"),
                format!(
                    "expected a dynamic threshold exponent -8..8, found {}",
                    self.pfc.dynamic_th
                ),
            );
        }
        if let Some(g) = self.ecn.scale_from_gbps
            && !(g.is_finite() && g > 0.0)
        {
            d.error(
                &at.key("ecn").key("scale_from_gbps"),
                format!("expected a rate > 0 Gbit/s, found {g}"),
            );
        }
        for tier in Tier::ALL {
            if let Some(p) = self.ecn.explicit(tier) {
                p.validate(&at.key("ecn").key(tier.as_str()), d);
            }
        }
        if self.buffer.switch_bytes == 0 {
            d.error(
                &at.key("buffer").key("switch_bytes"),
                "expected a buffer size > 0, found 0".to_string(),
            );
        }
    }

    /// The traffic classes: priorities, congestion-control algorithms and their parameters.
    fn validate_classes(&self, at: &KeyPath, d: &mut Diagnostics) {
        if self.classes.is_empty() {
            d.error(
                &at.key("classes"),
                "expected at least one traffic class".to_string(),
            );
        }
        for (name, c) in &self.classes {
            let cat = at.key("classes").key(name);
            if c.priority > 7 {
                d.error(
                    &cat.key("priority"),
                    format!("expected a priority 0..7, found {}", c.priority),
                );
            }
            if c.dscp > 63 {
                d.error(
                    &cat.key("dscp"),
                    format!("expected a DSCP 0..63, found {}", c.dscp),
                );
            }
            if c.priority == self.cnp.priority {
                d.error(
                    &cat.key("priority"),
                    format!(
                        "priority {} is the CNP priority (config.cnp.priority); data needs its own",
                        c.priority
                    ),
                );
            }
            c.dcqcn.validate(&cat.key("dcqcn"), d);
            let t = &c.timely;
            let tat = cat.key("timely");
            if limits::check_period_us(t.t_high_us, &tat.key("t_high_us"), d)
                && !(t.t_low_us > 0.0 && t.t_low_us < t.t_high_us)
            {
                d.error(
                    &tat.key("t_low_us"),
                    format!(
                        "expected 0 < t_low_us < t_high_us, found {} and {}",
                        limits::Num(t.t_low_us),
                        limits::Num(t.t_high_us)
                    ),
                );
            }
            for (k, v) in [("ewma_alpha", t.ewma_alpha), ("beta", t.beta)] {
                if !(v > 0.0 && v <= 1.0) {
                    d.error(
                        &tat.key(k),
                        format!("expected a fraction in (0, 1], found {}", limits::Num(v)),
                    );
                }
            }
            for (k, v) in [
                ("add_step_mbps", t.add_step_mbps),
                ("hai_step_mbps", t.hai_step_mbps),
                ("min_rate_mbps", t.min_rate_mbps),
            ] {
                limits::check_rate_mbps(v, true, &tat.key(k), d);
            }
            limits::check_period_us(t.min_rtt_us, &tat.key("min_rtt_us"), d);
            let h = &c.hpcc;
            let hat = cat.key("hpcc");
            if !(h.eta > 0.0 && h.eta <= 1.0) {
                d.error(
                    &hat.key("eta"),
                    format!(
                        "expected a target utilisation in (0, 1], found {}",
                        limits::Num(h.eta)
                    ),
                );
            }
            for (k, v) in [("ai_mbps", h.ai_mbps), ("min_rate_mbps", h.min_rate_mbps)] {
                limits::check_rate_mbps(v, true, &hat.key(k), d);
            }
            // The INT record holds the multiplier in a byte; the simulator's INT_MULTI is the
            // NIC rate / 25 Gbit/s, 16 at 400 Gbit/s.
            if h.int_multi > u32::from(u8::MAX) {
                d.error(
                    &hat.key("int_multi"),
                    format!("expected 0 (from the NIC rate) or 1..255, found {}", h.int_multi),
                );
            }
            let t = &c.dctcp;
            let tat = cat.key("dctcp");
            if !(t.g > 0.0 && t.g <= 1.0) {
                d.error(
                    &tat.key("g"),
                    format!("expected a gain in (0, 1], found {}", limits::Num(t.g)),
                );
            }
            for (k, v) in [("ai_mbps", t.ai_mbps), ("min_rate_mbps", t.min_rate_mbps)] {
                limits::check_rate_mbps(v, true, &tat.key(k), d);
            }
        }
    }

    /// CNP marking, the RoCE transport, NVLink, and the buffer sizes.
    fn validate_transport(&self, at: &KeyPath, d: &mut Diagnostics) {
        let pfc = at.key("pfc");
        if self.cnp.priority > 7 {
            d.error(
                &at.key("cnp").key("priority"),
                format!("expected a priority 0..7, found {}", self.cnp.priority),
            );
        }
        let tr = at.key("transport");
        if !(MIN_MTU_BYTES..=MAX_ROCE_MTU_BYTES).contains(&self.transport.roce_mtu_bytes) {
            d.error(
                &tr.key("roce_mtu_bytes"),
                format!(
                    "expected a RoCE MTU of {MIN_MTU_BYTES}..={MAX_ROCE_MTU_BYTES} bytes (the largest IB MTU), found {}",
                    self.transport.roce_mtu_bytes
                ),
            );
        }
        if !(1..=crate::config::MAX_IB_TIMEOUT).contains(&self.transport.ib_timeout) {
            d.error(
                &tr.key("ib_timeout"),
                format!(
                    "expected an ACK timeout exponent of 1..={} (4.096 µs x 2^n; NCCL_IB_TIMEOUT), found {}",
                    crate::config::MAX_IB_TIMEOUT,
                    self.transport.ib_timeout
                ),
            );
        }
        if self.transport.retry_cnt > crate::config::DEFAULT_RETRY_CNT {
            d.error(
                &tr.key("retry_cnt"),
                format!(
                    "expected a retry count of 0..={} (NCCL_IB_RETRY_CNT), found {}",
                    crate::config::DEFAULT_RETRY_CNT,
                    self.transport.retry_cnt
                ),
            );
        }
        if self.transport.header_bytes > MAX_HEADER_BYTES {
            d.error(
                &tr.key("header_bytes"),
                format!(
                    "expected at most {MAX_HEADER_BYTES} header bytes per packet, found {}",
                    self.transport.header_bytes
                ),
            );
        }
        if self.transport.qps_per_connection == 0 || self.transport.qps_per_connection > 128 {
            d.error(
                &tr.key("qps_per_connection"),
                format!(
                    "expected 1..128 (NCCL's range), found {}",
                    self.transport.qps_per_connection
                ),
            );
        }
        if !(1..=MAX_WR_DEPTH).contains(&self.transport.wr_depth) {
            d.error(
                &tr.key("wr_depth"),
                format!(
                    "expected a queue depth of 1..={MAX_WR_DEPTH} (max_qp_wr of ConnectX NICs), found {}",
                    self.transport.wr_depth
                ),
            );
        }
        let nv = self.intra_host.nvlink_gbps;
        limits::check_link_rate_gbps(nv, &at.key("intra_host").key("nvlink_gbps"), d);
        limits::check_time_us(
            self.intra_host.nvlink_latency_us,
            &at.key("intra_host").key("nvlink_latency_us"),
            d,
        );
        for (k, v) in [
            ("switch_bytes", self.buffer.switch_bytes),
            ("reserved_bytes", self.buffer.reserved_bytes),
        ] {
            limits::check_buffer_bytes(v, &at.key("buffer").key(k), d);
        }
        limits::check_buffer_bytes(self.pfc.xon_offset_bytes, &pfc.key("xon_offset_bytes"), d);
        if let Some(h) = self.pfc.headroom_bytes {
            limits::check_buffer_bytes(h, &pfc.key("headroom_bytes"), d);
        }
    }

    /// The registered-memory pool.
    fn validate_memory(&self, at: &KeyPath, d: &mut Diagnostics) {
        let mem = &self.memory;
        let mat = at.key("memory");
        for (k, v) in [
            ("region_bytes", mem.region_bytes),
            ("buffer_bytes", mem.buffer_bytes),
            ("page_bytes", mem.page_bytes),
            ("cache_line_bytes", mem.cache_line_bytes),
        ] {
            limits::check_buffer_bytes(v, &mat.key(k), d);
        }
        if !mem.page_bytes.is_power_of_two() || mem.page_bytes < 4096 {
            d.error(
                &mat.key("page_bytes"),
                format!("expected a power of two >= 4096, found {}", mem.page_bytes),
            );
        }
        if mem.cache_line_bytes == 0
            || mem.buffer_bytes == 0
            || !mem.buffer_bytes.is_multiple_of(mem.cache_line_bytes)
        {
            d.error(
                &mat.key("buffer_bytes"),
                format!(
                    "expected a non-zero multiple of cache_line_bytes ({}), found {}",
                    mem.cache_line_bytes, mem.buffer_bytes
                ),
            );
        }
        if mem.buffer_bytes > mem.region_bytes {
            d.error(
                &mat.key("region_bytes"),
                format!(
                    "expected a region of at least one buffer ({} bytes), found {}",
                    mem.buffer_bytes, mem.region_bytes
                ),
            );
        }
    }
}

impl crate::config::DcqcnParams {
    /// Checks each parameter against the firmware's range (docs/reference/congestion-control.md §1.5).
    pub(super) fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        let dc = self;
        let dat = at;
        // The integer knobs' ranges are the mlx5 knob table's; times and rates are
        // checked below in the model's units.
        for k in crate::mlx5::KNOBS {
            if let crate::mlx5::Field::Dcqcn { model_key, get, .. } = k.field
                && k.max < crate::mlx5::MAX_SYSFS_VALUE
            {
                let v = get(dc);
                if !(k.min..=k.max).contains(&v) {
                    d.error(
                        &dat.key(model_key),
                        format!("expected {}..{}, found {v}", k.min, k.max),
                    );
                }
            }
        }
        for (k, v) in [
            ("rpg_time_reset_us", dc.rpg_time_reset_us),
            ("dce_tcp_rtt_us", dc.dce_tcp_rtt_us),
            ("rate_reduce_monitor_period_us", dc.rate_reduce_monitor_period_us),
        ] {
            limits::check_period_us(v, &dat.key(k), d);
        }
        for (k, v) in [
            ("rpg_ai_rate_mbps", dc.rpg_ai_rate_mbps),
            ("rpg_hai_rate_mbps", dc.rpg_hai_rate_mbps),
            ("rpg_min_rate_mbps", dc.rpg_min_rate_mbps),
            ("rpg_max_rate_mbps", dc.rpg_max_rate_mbps),
            ("rate_to_set_on_first_cnp_mbps", dc.rate_to_set_on_first_cnp_mbps),
        ] {
            limits::check_rate_mbps(v, false, &dat.key(k), d);
        }
        limits::check_time_us(
            dc.min_time_between_cnps_us,
            &dat.key("min_time_between_cnps_us"),
            d,
        );
    }
}

impl RedProfile {
    pub(super) fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        limits::check_buffer_bytes(self.kmin_bytes, &at.key("kmin_bytes"), d);
        limits::check_buffer_bytes(self.kmax_bytes, &at.key("kmax_bytes"), d);
        if self.kmin_bytes > self.kmax_bytes {
            d.error(
                &at.key("kmin_bytes"),
                format!(
                    "expected kmin_bytes <= kmax_bytes, found {} > {}",
                    self.kmin_bytes, self.kmax_bytes
                ),
            );
        }
        if !(self.pmax >= 0.0 && self.pmax <= 1.0) {
            d.error(
                &at.key("pmax"),
                format!("expected a probability 0..1, found {}", limits::Num(self.pmax)),
            );
        }
    }
}

/// `NCCL_MAX_NCHANNELS` and `NCCL_MIN_NCHANNELS` at most `MAXCHANNELS`
/// (docs/reference/collectives-and-nccl.md §1).
pub(super) const NCCL_MAX_CHANNELS: u32 = 64;
/// The values `NCCL_NTHREADS` takes (docs/reference/collectives-and-nccl.md §5).
pub(super) const NCCL_NTHREADS_VALUES: [u32; 4] = [64, 128, 256, 512];
/// `NCCL_NET_GDR_LEVEL`'s names, with P2C, the automatic level when C2C is on
/// (docs/reference/collectives-and-nccl.md §5 and its path-type ladder).
pub(super) const NCCL_GDR_LEVELS: [&str; 6] = ["LOC", "PIX", "PXB", "P2C", "PHB", "SYS"];

impl crate::config::NcclConfig {
    /// NCCL's own ranges for its environment variables, and the settings that
    /// contradict each other. A value NCCL would refuse or quietly replace is an error
    /// here, because the rendered configuration would not run as simulated.
    pub fn validate(&self, at: &KeyPath, d: &mut Diagnostics) {
        for (k, v) in [
            ("min_channels", self.min_channels),
            ("max_channels", self.max_channels),
        ] {
            if v > NCCL_MAX_CHANNELS {
                d.error(
                    &at.key(k),
                    format!("expected 0 (NCCL's choice) or 1..={NCCL_MAX_CHANNELS} channels (MAXCHANNELS), found {v}"),
                );
            }
        }
        if self.min_channels > 0 && self.max_channels > 0 && self.min_channels > self.max_channels {
            d.error(
                &at.key("min_channels"),
                format!(
                    "expected at most max_channels ({}), found {} (NCCL would run {} channels, not the minimum asked for)",
                    self.max_channels, self.min_channels, self.max_channels
                ),
            );
        }
        if !NCCL_NTHREADS_VALUES.contains(&self.nthreads) {
            d.error(
                &at.key("nthreads"),
                format!(
                    "expected 64, 128, 256 or 512 threads per CTA (NCCL_NTHREADS), found {}",
                    self.nthreads
                ),
            );
        }
        for (k, v) in [
            ("buffsize_bytes", self.buffsize_bytes),
            ("ll_buffsize_bytes", self.ll_buffsize_bytes),
            ("ll128_buffsize_bytes", self.ll128_buffsize_bytes),
            ("p2p_net_chunk_bytes", self.p2p_net_chunk_bytes),
        ] {
            if v == 0 {
                d.error(
                    &at.key(k),
                    "expected a size of at least 1 byte, found 0".to_string(),
                );
            } else {
                limits::check_buffer_bytes(v, &at.key(k), d);
            }
        }
        if self.cross_nic > 2 {
            d.error(
                &at.key("cross_nic"),
                format!("expected 0, 1 or 2 (NCCL_CROSS_NIC), found {}", self.cross_nic),
            );
        }
        // The names, or the legacy integers 0 to 4 (LOC to SYS).
        let legacy = self.net_gdr_level.parse::<u8>().is_ok_and(|n| n <= 4);
        if !legacy && !NCCL_GDR_LEVELS.contains(&self.net_gdr_level.as_str()) {
            d.error(
                &at.key("net_gdr_level"),
                format!(
                    "expected one of {} or 0..=4 (NCCL_NET_GDR_LEVEL), found `{}`",
                    NCCL_GDR_LEVELS.join(", "),
                    self.net_gdr_level
                ),
            );
        }
        if let Some(p) = self.fifo_priority
            && p > super::overrides::MAX_PRIORITY
        {
            d.error(
                &at.key("fifo_priority"),
                format!("expected a priority 0..7, found {p}"),
            );
        }
        for (k, v) in [
            ("ll_slice_us", self.ll_slice_us),
            ("ll128_slice_us", self.ll128_slice_us),
            ("simple_slice_us", self.simple_slice_us),
            ("net_overhead_us", self.net_overhead_us),
            ("flush_us", self.flush_us),
        ] {
            limits::check_time_us(v, &at.key(k), d);
        }
        if let Some(v) = self.base_latency_us {
            limits::check_time_us(v, &at.key("base_latency_us"), d);
        }
    }
}
