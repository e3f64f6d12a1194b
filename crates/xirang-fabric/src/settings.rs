//! The numeric settings of a [`FabricConfig`] by the dotted names scenario files give them
//! (`transport.qps_per_connection`, `classes.training.dcqcn.rpg_ai_rate_mbps`,
//! `ecn.leaf.kmin_bytes`): one table per configuration struct of which fields are numbers,
//! read and written in place as typed values. A tuning candidate is applied through it,
//! with no text or value-tree round trip.

use crate::config::{
    BufferConfig, CnpConfig, DcqcnParams, DctcpParams, FabricConfig, HpccParams, IntraHostConfig,
    MemoryPoolConfig, MtuConfig, NcclConfig, PfcConfig, RedProfile, TimelyParams, TrafficClass,
    TransportConfig,
};
use crate::model::Tier;

/// A numeric field, borrowed for reading or writing.
#[derive(Debug)]
pub enum Num<'a> {
    /// A whole number of this width.
    U8(&'a mut u8),
    /// A whole number of this width.
    U16(&'a mut u16),
    /// A whole number of this width.
    U32(&'a mut u32),
    /// A whole number of this width.
    U64(&'a mut u64),
    /// A signed whole number (SONiC's dynamic thresholds).
    I8(&'a mut i8),
    /// A real number.
    F64(&'a mut f64),
}

macro_rules! num_from {
    ($($t:ty => $v:ident),*) => {
        $(impl<'a> From<&'a mut $t> for Num<'a> {
            fn from(x: &'a mut $t) -> Num<'a> {
                Num::$v(x)
            }
        })*
    };
}
num_from!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, f64 => F64);

impl Num<'_> {
    /// Whether the field holds whole numbers.
    pub fn is_integer(&self) -> bool {
        !matches!(self, Num::F64(_))
    }

    /// Its value.
    pub fn get(&self) -> f64 {
        match self {
            Num::U8(x) => f64::from(**x),
            Num::U16(x) => f64::from(**x),
            Num::U32(x) => f64::from(**x),
            Num::U64(x) => **x as f64,
            Num::I8(x) => f64::from(**x),
            Num::F64(x) => **x,
        }
    }

    /// Sets it to `v`, rounded for a whole-number field, which must hold it.
    pub fn set(self, v: f64) -> Result<(), String> {
        fn whole<T: TryFrom<i128>>(v: f64, lo: i128, hi: i128) -> Result<T, String> {
            let r = v.round();
            if r.is_finite() && (lo as f64..=hi as f64).contains(&r) {
                T::try_from(r as i128).map_err(|_| format!("expected a whole number {lo}..={hi}, found {v}"))
            } else {
                Err(format!("expected a whole number {lo}..={hi}, found {v}"))
            }
        }
        match self {
            Num::U8(x) => *x = whole(v, 0, u8::MAX.into())?,
            Num::U16(x) => *x = whole(v, 0, u16::MAX.into())?,
            Num::U32(x) => *x = whole(v, 0, u32::MAX.into())?,
            Num::U64(x) => *x = whole(v, 0, i64::MAX.into())?,
            Num::I8(x) => *x = whole(v, i8::MIN.into(), i8::MAX.into())?,
            Num::F64(x) => *x = v,
        }
        Ok(())
    }
}

/// A configuration struct's keys: which are numbers, and which are not.
pub trait Fields {
    /// Its numeric fields (an optional one only while it is set).
    fn num(&mut self, key: &str) -> Option<Num<'_>>;
    /// The keys of its numeric fields.
    const NUMBERS: &'static [&'static str];
    /// Its other keys (switches, choices, lists, sub-tables).
    const OTHERS: &'static [&'static str];
}

macro_rules! fields {
    ($ty:ty { num: [$($f:ident),* $(,)?] $(, opt: [$($o:ident),* $(,)?])? $(, other: [$($x:ident),* $(,)?])? }) => {
        impl Fields for $ty {
            fn num(&mut self, key: &str) -> Option<Num<'_>> {
                match key {
                    $(stringify!($f) => Some(Num::from(&mut self.$f)),)*
                    $($(stringify!($o) => self.$o.as_mut().map(Num::from),)*)?
                    _ => None,
                }
            }
            const NUMBERS: &'static [&'static str] = &[$(stringify!($f),)* $($(stringify!($o),)*)?];
            const OTHERS: &'static [&'static str] = &[$($(stringify!($x)),*)?];
        }
    };
}

fields!(MtuConfig {
    num: [nic_bytes, switch_bytes]
});
fields!(PfcConfig {
    num: [pause_quanta, dynamic_th, xon_offset_bytes],
    opt: [headroom_bytes],
    other: [enabled, priorities]
});
fields!(RedProfile {
    num: [kmin_bytes, kmax_bytes, pmax],
    other: [enabled]
});
fields!(BufferConfig {
    num: [switch_bytes, reserved_bytes, lossy_dynamic_th]
});
fields!(TrafficClass {
    num: [priority, dscp],
    other: [cc, dcqcn, timely, hpcc, dctcp]
});
fields!(DcqcnParams {
    num: [
        rpg_time_reset_us,
        rpg_byte_reset_bytes,
        rpg_threshold,
        rpg_ai_rate_mbps,
        rpg_hai_rate_mbps,
        rpg_max_rate_mbps,
        rpg_min_rate_mbps,
        rpg_gd,
        rpg_min_dec_fac_pct,
        dce_tcp_g,
        dce_tcp_rtt_us,
        rate_reduce_monitor_period_us,
        initial_alpha_value,
        rate_to_set_on_first_cnp_mbps,
        min_time_between_cnps_us,
    ],
    other: [clamp_tgt_rate, clamp_tgt_rate_after_time_inc]
});
fields!(TimelyParams {
    num: [
        t_low_us,
        t_high_us,
        ewma_alpha,
        beta,
        add_step_mbps,
        hai_step_mbps,
        hai_threshold,
        min_rtt_us,
        min_rate_mbps,
    ],
    other: [hai_below_t_low]
});
fields!(HpccParams {
    num: [eta, max_stage, ai_mbps, min_rate_mbps, int_multi],
    other: [fast_react]
});
fields!(DctcpParams {
    num: [g, ai_mbps, min_rate_mbps]
});
fields!(CnpConfig {
    num: [priority, dscp],
    other: [ack_on_cnp_priority]
});
fields!(TransportConfig {
    num: [
        qps_per_connection,
        wr_depth,
        cq_moderation_count,
        cq_moderation_us,
        roce_mtu_bytes,
        header_bytes,
        ib_timeout,
        retry_cnt,
    ]
});
fields!(NcclConfig {
    num: [
        buffsize_bytes,
        min_channels,
        max_channels,
        nthreads,
        p2p_net_chunk_bytes,
        cross_nic,
        ll_buffsize_bytes,
        ll128_buffsize_bytes,
        ll_slice_us,
        ll128_slice_us,
        simple_slice_us,
        net_overhead_us,
        flush_us,
    ],
    opt: [fifo_priority, base_latency_us],
    other: [algo, proto, net_gdr_level, ib_split_data_on_qps, gdr_flush]
});
fields!(MemoryPoolConfig {
    num: [region_bytes, buffer_bytes, page_bytes, cache_line_bytes]
});
fields!(IntraHostConfig {
    num: [nvlink_gbps, nvlink_latency_us],
    other: [nvswitch, bond_hash_policy, lag_port_select]
});

/// The sections of `[config]`.
const SECTIONS: [&str; 10] = [
    "mtu",
    "pfc",
    "ecn",
    "buffer",
    "classes",
    "cnp",
    "transport",
    "nccl",
    "memory",
    "intra_host",
];

/// A class's congestion-control tables.
const CC_TABLES: [&str; 4] = ["dcqcn", "timely", "hpcc", "dctcp"];

/// Why `name` is not a numeric setting: it names something else, or nothing (with the
/// closest key at its parent, when the parent exists).
fn not_found(name: &str, parent_keys: Option<Vec<&str>>, other: bool) -> String {
    if other {
        return format!("`{name}` is not a number in the configuration");
    }
    let (parent, last) = name.rsplit_once('.').unwrap_or(("", name));
    let hint = parent_keys
        .and_then(|keys| crate::diag::closest(last, keys.into_iter()))
        .map(|c| {
            format!(
                "; did you mean `{}`?",
                if parent.is_empty() {
                    c.to_string()
                } else {
                    format!("{parent}.{c}")
                }
            )
        })
        .unwrap_or_default();
    format!("`{name}` names no setting of the configuration{hint}")
}

/// Runs `f` on the numeric setting `name` of `config`, on a fabric with switches of
/// `tiers` (an ECN profile exists for each, written out when `f` writes it).
pub fn with_num<R>(
    config: &mut FabricConfig,
    tiers: &[Tier],
    name: &str,
    f: impl FnOnce(Num<'_>) -> R,
) -> Result<R, String> {
    fn on<T: Fields, R>(t: &mut T, name: &str, key: &str, f: impl FnOnce(Num<'_>) -> R) -> Result<R, String> {
        match t.num(key) {
            Some(n) => Ok(f(n)),
            None => Err(not_found(
                name,
                Some(T::NUMBERS.iter().chain(T::OTHERS).copied().collect()),
                T::OTHERS.contains(&key),
            )),
        }
    }
    let segs: Vec<&str> = name.split('.').collect();
    match segs.as_slice() {
        ["mtu", k] => on(&mut config.mtu, name, k, f),
        ["pfc", k] => on(&mut config.pfc, name, k, f),
        ["buffer", k] => on(&mut config.buffer, name, k, f),
        ["cnp", k] => on(&mut config.cnp, name, k, f),
        ["transport", k] => on(&mut config.transport, name, k, f),
        ["nccl", k] => on(&mut config.nccl, name, k, f),
        ["memory", k] => on(&mut config.memory, name, k, f),
        ["intra_host", k] => on(&mut config.intra_host, name, k, f),
        ["ecn", "scale_from_gbps"] => match config.ecn.scale_from_gbps.as_mut() {
            Some(x) => Ok(f(Num::F64(x))),
            None => Err(not_found(name, None, false)),
        },
        ["ecn", tier, k] => {
            let t = Tier::ALL
                .into_iter()
                .find(|t| t.as_str() == *tier && (tiers.contains(t) || config.ecn.explicit(*t).is_some()));
            let Some(t) = t else {
                return Err(not_found(name, None, false));
            };
            let mut p = config.ecn.profile(t);
            let r = on(&mut p, name, k, f)?;
            config.ecn.set(t, p);
            Ok(r)
        }
        ["classes", class, k] => match config.classes.get_mut(*class) {
            Some(_) if CC_TABLES.contains(k) => Err(not_found(name, None, true)),
            Some(c) => on(c, name, k, f),
            None => Err(not_found(name, None, false)),
        },
        ["classes", class, table, k] => {
            let Some(c) = config.classes.get_mut(*class) else {
                return Err(not_found(name, None, false));
            };
            match *table {
                "dcqcn" => on(&mut c.dcqcn, name, k, f),
                "timely" => on(&mut c.timely, name, k, f),
                "hpcc" => on(&mut c.hpcc, name, k, f),
                "dctcp" => on(&mut c.dctcp, name, k, f),
                // A table a class does not have: the hint would be for the wrong level
                // of the name (its last part, not the table), so none.
                _ => Err(not_found(name, None, false)),
            }
        }
        [k] if SECTIONS.contains(k) => Err(not_found(name, None, true)),
        [_] => Err(not_found(name, Some(SECTIONS.to_vec()), false)),
        _ => Err(not_found(name, None, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key the configuration writes is in a table, so a new field cannot be missed
    /// silently by the tuner.
    #[test]
    fn every_key_the_configuration_writes_is_listed() {
        fn keys_of<T: serde::Serialize>(t: &T) -> Vec<String> {
            match toml::Value::try_from(t).expect("serializes") {
                toml::Value::Table(m) => m.keys().cloned().collect(),
                v => panic!("not a table: {v}"),
            }
        }
        fn check<T: Fields + serde::Serialize>(t: &T, what: &str) {
            for k in keys_of(t) {
                assert!(
                    T::NUMBERS.contains(&k.as_str()) || T::OTHERS.contains(&k.as_str()),
                    "{what}.{k} is in no table"
                );
            }
        }
        let mut c = FabricConfig::default();
        c.pfc.headroom_bytes = Some(1);
        c.nccl.fifo_priority = Some(1);
        c.nccl.base_latency_us = Some(1.0);
        check(&c.mtu, "mtu");
        check(&c.pfc, "pfc");
        check(&c.buffer, "buffer");
        check(&c.cnp, "cnp");
        check(&c.transport, "transport");
        check(&c.nccl, "nccl");
        check(&c.memory, "memory");
        check(&c.intra_host, "intra_host");
        check(&c.ecn.profile(Tier::Leaf), "ecn.leaf");
        let class = c.classes.values().next().expect("a default class").clone();
        check(&class, "classes.X");
        check(&class.dcqcn, "dcqcn");
        check(&class.timely, "timely");
        check(&class.hpcc, "hpcc");
        check(&class.dctcp, "dctcp");
        let mut sections = keys_of(&c);
        sections.sort();
        let mut listed: Vec<String> = SECTIONS.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(sections, listed);
    }

    #[test]
    fn a_setting_reads_and_writes_in_place_with_its_type() {
        let mut c = FabricConfig::default();
        let class = c.classes.keys().next().expect("a default class").clone();
        let name = format!("classes.{class}.dcqcn.rpg_ai_rate_mbps");
        with_num(&mut c, &[Tier::Leaf], &name, |n| n.set(7.5))
            .unwrap()
            .unwrap();
        assert_eq!(c.classes[&class].dcqcn.rpg_ai_rate_mbps, 7.5);
        with_num(&mut c, &[Tier::Leaf], "transport.qps_per_connection", |n| {
            n.set(3.6)
        })
        .unwrap()
        .unwrap();
        assert_eq!(c.transport.qps_per_connection, 4, "rounded");
        let e = with_num(&mut c, &[Tier::Leaf], "transport.ib_timeout", |n| n.set(300.0)).unwrap();
        assert_eq!(e, Err("expected a whole number 0..=255, found 300".to_string()));
        with_num(&mut c, &[Tier::Leaf], "ecn.leaf.kmin_bytes", |n| n.set(1000.0))
            .unwrap()
            .unwrap();
        assert_eq!(c.ecn.explicit(Tier::Leaf).map(|p| p.kmin_bytes), Some(1000));
        let kind = |c: &mut FabricConfig, n: &str| with_num(c, &[Tier::Leaf], n, |n| n.is_integer());
        assert_eq!(kind(&mut c, "nccl.ll_slice_us"), Ok(false));
        assert_eq!(
            kind(&mut c, "ecn.spine.kmin_bytes"),
            Err("`ecn.spine.kmin_bytes` names no setting of the configuration".to_string()),
            "a tier the fabric lacks"
        );
        assert_eq!(
            kind(&mut c, "pfc.enabled"),
            Err("`pfc.enabled` is not a number in the configuration".to_string())
        );
        assert_eq!(
            kind(&mut c, "transport.qps_per_conection"),
            Err("`transport.qps_per_conection` names no setting of the configuration; did you mean `transport.qps_per_connection`?".to_string())
        );
    }
}
