//! The DCQCN knobs of mlx5 NICs as MLNX_OFED shows them in sysfs
//! (`/sys/class/net/IF/ecn/roce_rp/*` and `roce_np/*`): one table of each knob's
//! directory and file, the model field it sets with its unit conversion, and the range
//! the firmware takes (docs/reference/congestion-control.md §1.5). `xirang tune` renders
//! its script from it, the audit reads a host's values back into the model through it,
//! and the rollout checks a script's knobs against it.

use crate::config::DcqcnParams;

/// The firmware counts `rpg_byte_reset` in 64-byte units (docs/reference/congestion-control.md
/// §1.5; the unit is partly unconfirmed there).
pub const BYTE_RESET_UNIT_BYTES: u64 = 64;

/// Per-priority enables (`enable/0` .. `enable/7`): one per 802.1p priority.
pub const PRIORITIES: u8 = 8;

/// Largest value a knob file takes: the driver reads and writes them as u32
/// (docs/reference/congestion-control.md §1.5, "plain decimal u32").
pub const MAX_SYSFS_VALUE: u64 = u32::MAX as u64;

/// A knob's directory under `/sys/class/net/IF/ecn/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// `roce_rp`: the reaction point (the sender's rate control).
    Rp,
    /// `roce_np`: the notification point (the receiver's CNPs).
    Np,
}

impl Dir {
    /// Both directories, in the order the script lists them.
    pub const ALL: [Dir; 2] = [Dir::Rp, Dir::Np];

    /// The directory's name in sysfs.
    pub const fn name(self) -> &'static str {
        match self {
            Dir::Rp => "roce_rp",
            Dir::Np => "roce_np",
        }
    }

    /// The directory named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Dir> {
        Dir::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// What a knob's value is in Xirang's model.
#[derive(Debug, Clone, Copy)]
pub enum Field {
    /// A DCQCN parameter: `get` gives the sysfs value of the model's, `set` puts a sysfs
    /// value into the model's units.
    Dcqcn {
        /// The parameter's key in a scenario's `dcqcn` table.
        model_key: &'static str,
        /// The sysfs value of the model's.
        get: fn(&DcqcnParams) -> u64,
        /// Sets the model's from a sysfs value.
        set: fn(&mut DcqcnParams, u64),
    },
    /// The DSCP of the CNPs the NIC sends (the scenario's `[config.cnp] dscp`).
    CnpDscp,
    /// The 802.1p priority of the CNPs (the scenario's `[config.cnp] priority`).
    CnpPriority,
}

/// One knob file.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// `roce_rp` or `roce_np`.
    pub dir: Dir,
    /// File name under the directory (`rpg_ai_rate`).
    pub file: &'static str,
    /// What the value is in the model.
    pub field: Field,
    /// Smallest value the firmware takes (docs/reference/congestion-control.md §1.5).
    pub min: u64,
    /// Largest, inclusive.
    pub max: u64,
    /// Unit of the sysfs value, for messages.
    pub unit: &'static str,
}

/// A model value in whole sysfs units: times and rates are whole µs and Mbit/s there.
fn whole(x: f64) -> u64 {
    x.round().max(0.0) as u64
}

/// A sysfs value in the model's u32 fields (saturating: the range check reports it).
fn narrow(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A knob of a `DcqcnParams` field, read with `get` and written with `set` (closures of
/// the parameters `d` and the sysfs value `v`).
macro_rules! dcqcn_knob {
    ($dir:expr, $file:literal, $field:ident, |$d:ident| $get:expr, |$d2:ident, $v:ident| $set:expr, $min:expr, $max:expr, $unit:literal) => {
        Knob {
            dir: $dir,
            file: $file,
            field: Field::Dcqcn {
                model_key: stringify!($field),
                get: |$d| $get,
                set: |$d2, $v| $set,
            },
            min: $min,
            max: $max,
            unit: $unit,
        }
    };
}

/// A time or rate: whole units in sysfs, any u32.
macro_rules! f64_knob {
    ($dir:expr, $file:literal, $field:ident, $unit:literal) => {
        dcqcn_knob!(
            $dir,
            $file,
            $field,
            |d| whole(d.$field),
            |d, v| d.$field = v as f64,
            0,
            MAX_SYSFS_VALUE,
            $unit
        )
    };
}

/// A count or fixed-point value within the firmware's range.
macro_rules! u32_knob {
    ($dir:expr, $file:literal, $field:ident, $min:expr, $max:expr) => {
        dcqcn_knob!(
            $dir,
            $file,
            $field,
            |d| u64::from(d.$field),
            |d, v| d.$field = narrow(v),
            $min,
            $max,
            ""
        )
    };
}

/// A switch: 0 or 1.
macro_rules! bool_knob {
    ($dir:expr, $file:literal, $field:ident) => {
        dcqcn_knob!(
            $dir,
            $file,
            $field,
            |d| u64::from(d.$field),
            |d, v| d.$field = v != 0,
            0,
            1,
            ""
        )
    };
}

/// Every knob `xirang tune` sets, in the order its script lists them.
pub const KNOBS: &[Knob] = &[
    f64_knob!(Dir::Rp, "rpg_time_reset", rpg_time_reset_us, "µs"),
    Knob {
        dir: Dir::Rp,
        file: "rpg_byte_reset",
        field: Field::Dcqcn {
            model_key: "rpg_byte_reset_bytes",
            get: |d| d.rpg_byte_reset_bytes / BYTE_RESET_UNIT_BYTES,
            set: |d, v| d.rpg_byte_reset_bytes = v.saturating_mul(BYTE_RESET_UNIT_BYTES),
        },
        min: 0,
        max: MAX_SYSFS_VALUE,
        unit: "x 64 B",
    },
    // F, the increase events before fast recovery moves on: 1..31.
    u32_knob!(Dir::Rp, "rpg_threshold", rpg_threshold, 1, 31),
    f64_knob!(Dir::Rp, "rpg_max_rate", rpg_max_rate_mbps, "Mbit/s"),
    f64_knob!(Dir::Rp, "rpg_ai_rate", rpg_ai_rate_mbps, "Mbit/s"),
    f64_knob!(Dir::Rp, "rpg_hai_rate", rpg_hai_rate_mbps, "Mbit/s"),
    // log2 divisor of the decrease: 10..11 per DOCA.
    u32_knob!(Dir::Rp, "rpg_gd", rpg_gd, 10, 11),
    // Largest single cut, percent: 100 disables cuts.
    u32_knob!(Dir::Rp, "rpg_min_dec_fac", rpg_min_dec_fac_pct, 1, 100),
    f64_knob!(Dir::Rp, "rpg_min_rate", rpg_min_rate_mbps, "Mbit/s"),
    f64_knob!(
        Dir::Rp,
        "rate_to_set_on_first_cnp",
        rate_to_set_on_first_cnp_mbps,
        "Mbit/s"
    ),
    // Alpha's gain G and alpha itself are 10-bit fixed point.
    u32_knob!(Dir::Rp, "dce_tcp_g", dce_tcp_g, 0, 1023),
    f64_knob!(Dir::Rp, "dce_tcp_rtt", dce_tcp_rtt_us, "µs"),
    f64_knob!(
        Dir::Rp,
        "rate_reduce_monitor_period",
        rate_reduce_monitor_period_us,
        "µs"
    ),
    u32_knob!(Dir::Rp, "initial_alpha_value", initial_alpha_value, 0, 1023),
    bool_knob!(Dir::Rp, "clamp_tgt_rate", clamp_tgt_rate),
    bool_knob!(
        Dir::Rp,
        "clamp_tgt_rate_after_time_inc",
        clamp_tgt_rate_after_time_inc
    ),
    f64_knob!(Dir::Np, "min_time_between_cnps", min_time_between_cnps_us, "µs"),
    // A DSCP is 6 bits, an 802.1p priority 3.
    Knob {
        dir: Dir::Np,
        file: "cnp_dscp",
        field: Field::CnpDscp,
        min: 0,
        max: 63,
        unit: "",
    },
    Knob {
        dir: Dir::Np,
        file: "cnp_802p_prio",
        field: Field::CnpPriority,
        min: 0,
        max: (PRIORITIES - 1) as u64,
        unit: "",
    },
];

/// The knob `dir/file`, if the table has it (not the per-priority enables).
pub fn knob(dir: Dir, file: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.dir == dir && k.file == file)
}

/// The priority of a per-priority enable file (`enable/3`), if `file` is one.
pub fn enable_priority(file: &str) -> Option<u8> {
    let p: u8 = file.strip_prefix("enable/")?.parse().ok()?;
    (p < PRIORITIES && file.len() == "enable/".len() + 1).then_some(p)
}

/// Each knob's sysfs value for these parameters and CNP marking, in the table's order.
pub fn values(d: &DcqcnParams, cnp_dscp: u8, cnp_priority: u8) -> Vec<(&'static Knob, u64)> {
    KNOBS
        .iter()
        .map(|k| {
            let v = match k.field {
                Field::Dcqcn { get, .. } => get(d),
                Field::CnpDscp => u64::from(cnp_dscp),
                Field::CnpPriority => u64::from(cnp_priority),
            };
            (k, v)
        })
        .collect()
}

/// DCQCN parameters from a NIC's sysfs values (`read(dir, file)`): a knob it does not
/// show keeps the firmware default. The CNP marking is not a DCQCN parameter and is not
/// read here.
pub fn params(read: impl Fn(Dir, &str) -> Option<u64>) -> DcqcnParams {
    let mut p = DcqcnParams::default();
    for k in KNOBS {
        if let (Field::Dcqcn { set, .. }, Some(v)) = (k.field, read(k.dir, k.file)) {
            set(&mut p, v);
        }
    }
    p
}

/// Why `value` is not a value the firmware takes for `dir/file` (a table knob or an
/// enable), or None when it is. A file the table does not know is refused too: a script
/// that writes it was not written by `xirang tune`.
pub fn check(dir: Dir, file: &str, value: u64) -> Option<String> {
    if enable_priority(file).is_some() {
        return (value > 1).then(|| format!("expected 0 or 1 for {}/{file}, found {value}", dir.name()));
    }
    let Some(k) = knob(dir, file) else {
        let known: Vec<&str> = KNOBS.iter().filter(|k| k.dir == dir).map(|k| k.file).collect();
        return Some(format!(
            "{}/{file} is not an mlx5 DCQCN knob; expected enable/0..{} or one of {}",
            dir.name(),
            PRIORITIES - 1,
            known.join(", ")
        ));
    };
    (!(k.min..=k.max).contains(&value)).then(|| {
        format!(
            "expected {}..{}{} for {}/{file}, found {value}",
            k.min,
            k.max,
            if k.unit.is_empty() {
                String::new()
            } else {
                format!(" {}", k.unit)
            },
            dir.name()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The firmware's defaults (docs/reference/congestion-control.md §1.5) survive a
    /// render and a read back.
    #[test]
    fn defaults_round_trip_through_sysfs() {
        let d = DcqcnParams::default();
        let v = values(&d, 48, 6);
        let back = params(|dir, file| {
            v.iter()
                .find(|(k, _)| k.dir == dir && k.file == file)
                .map(|(_, x)| *x)
        });
        assert_eq!(back, d);
        for (k, x) in &v {
            assert_eq!(check(k.dir, k.file, *x), None, "{} {x}", k.file);
        }
    }

    #[test]
    fn the_byte_counter_is_in_64_byte_units() {
        let d = DcqcnParams {
            rpg_byte_reset_bytes: 32767 * 64,
            ..DcqcnParams::default()
        };
        let v = values(&d, 48, 6);
        assert_eq!(
            v.iter().find(|(k, _)| k.file == "rpg_byte_reset").unwrap().1,
            32767
        );
    }

    #[test]
    fn files_are_unique_and_model_keys_name_fields() {
        for (i, a) in KNOBS.iter().enumerate() {
            assert!(
                KNOBS[i + 1..].iter().all(|b| (b.dir, b.file) != (a.dir, a.file)),
                "{}",
                a.file
            );
            assert!(a.min <= a.max);
        }
        let keys: Vec<&str> = KNOBS
            .iter()
            .filter_map(|k| match k.field {
                Field::Dcqcn { model_key, .. } => Some(model_key),
                _ => None,
            })
            .collect();
        let json = serde_json::to_value(DcqcnParams::default()).unwrap();
        let fields = json.as_object().unwrap();
        assert_eq!(keys.len(), fields.len(), "every DCQCN parameter has a knob");
        for k in keys {
            assert!(fields.contains_key(k), "{k} is not a DcqcnParams field");
        }
    }

    #[test]
    fn checks_name_the_knob_and_the_range() {
        assert_eq!(check(Dir::Rp, "enable/3", 1), None);
        assert!(check(Dir::Rp, "enable/3", 2).unwrap().contains("expected 0 or 1"));
        assert!(
            check(Dir::Rp, "enable/8", 1)
                .unwrap()
                .contains("not an mlx5 DCQCN knob")
        );
        assert_eq!(
            check(Dir::Rp, "rpg_gd", 12).as_deref(),
            Some("expected 10..11 for roce_rp/rpg_gd, found 12")
        );
        assert!(
            check(Dir::Np, "rpg_gd", 11)
                .unwrap()
                .contains("expected enable/0..7 or one of min_time_between_cnps")
        );
        assert_eq!(
            check(Dir::Rp, "rpg_ai_rate", u64::from(u32::MAX) + 1).as_deref(),
            Some("expected 0..4294967295 Mbit/s for roce_rp/rpg_ai_rate, found 4294967296")
        );
    }
}
