//! Model files (`models/*.toml`) as presets of serving workloads: a `moe` or
//! `kv_transfer` workload with `model = "FILE"` takes every key it does not set itself
//! from the file's `[moe]` or `[kv_transfer]` table (a model's hidden size, experts, KV
//! layout, compute times), so a model's facts are written, and cited, once. The path is
//! relative to the scenario file. The merge happens before the scenario is read, so the
//! scenario as loaded (and as a tune writes it back) holds the values, not the reference.

use std::path::Path;

use crate::diag::{Diagnostic, KeyPath, Severity};

/// Largest model file read (they are a few kilobytes).
const MODEL_FILE_LIMIT: xirang_files::Limit = xirang_files::Limit::new(1 << 20, "model file");

/// The workload kinds a model file presets, with its table of each.
const PRESET_KINDS: [&str; 2] = ["moe", "kv_transfer"];

fn error(at: &KeyPath, text: &str, message: String) -> Diagnostic {
    Diagnostic {
        severity: Severity::Error,
        line: at.line_in(text),
        path: at.clone(),
        message,
    }
}

/// The scenario's text with every model reference replaced by the model's keys, or
/// `None` when it has none (then the text is read as it is).
pub(super) fn merge(text: &str, file: &Path) -> Result<Option<String>, Diagnostic> {
    // Only a file with a `model` key is read twice (a long flow list that merely says
    // "model" in a comment is not parsed a second time).
    let names_a_model = text.lines().any(|l| {
        l.trim_start()
            .strip_prefix("model")
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    }) || text.contains("model =")
        || text.contains("model=");
    if !names_a_model {
        return Ok(None);
    }
    let Ok(mut doc) = text.parse::<toml::Table>() else {
        // The normal parse reports the syntax error with its line.
        return Ok(None);
    };
    let base = file.parent().unwrap_or(Path::new("."));
    let mut merged = false;
    let Some(toml::Value::Table(workloads)) = doc.get_mut("workloads") else {
        return Ok(None);
    };
    for (name, w) in workloads.iter_mut() {
        let toml::Value::Table(w) = w else { continue };
        for kind in PRESET_KINDS {
            let Some(toml::Value::Table(spec)) = w.get_mut(kind) else {
                continue;
            };
            let Some(reference) = spec.remove("model") else {
                continue;
            };
            let at = KeyPath::root().key("workloads").key(name).key(kind).key("model");
            let toml::Value::String(path) = reference else {
                return Err(error(
                    &at,
                    text,
                    "expected the path of a model file (a string)".to_string(),
                ));
            };
            let full = base.join(&path);
            let model_text = xirang_files::read_text(&full, MODEL_FILE_LIMIT)
                .map_err(|e| error(&at, text, format!("`{path}`: {e}")))?;
            let model: toml::Table = model_text.parse().map_err(|e: toml::de::Error| {
                error(&at, text, format!("`{path}` is not valid TOML: {}", e.message()))
            })?;
            let Some(toml::Value::Table(preset)) = model.get(kind) else {
                return Err(error(
                    &at,
                    text,
                    format!("`{path}` has no `[{kind}]` table of presets for a `{kind}` workload"),
                ));
            };
            for (k, v) in preset {
                spec.entry(k.clone()).or_insert_with(|| v.clone());
            }
            merged = true;
        }
    }
    Ok(merged.then(|| toml::to_string(&doc).expect("invariant: a parsed TOML table serializes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workload's own keys win; the model fills the rest; the reference goes.
    #[test]
    fn a_workload_takes_what_it_does_not_set_from_its_model() {
        let dir = std::env::temp_dir().join(format!("xirang-models-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("m.toml"),
            "[moe]\nhidden = 7168\ntop_k = 8\nlayers = 58\n",
        )
        .unwrap();
        let text = "[workloads.d.moe]\nmodel = \"m.toml\"\ntokens_per_gpu = 64\nlayers = 2\n";
        let merged = merge(text, &dir.join("s.toml")).unwrap().unwrap();
        let t: toml::Table = merged.parse().unwrap();
        let moe = &t["workloads"]["d"]["moe"];
        assert_eq!(moe["hidden"].as_integer(), Some(7168));
        assert_eq!(moe["layers"].as_integer(), Some(2));
        assert_eq!(moe["tokens_per_gpu"].as_integer(), Some(64));
        assert!(moe.get("model").is_none());
        // Without a reference the text is read as it is.
        assert_eq!(
            merge("[workloads.d.moe]\nhidden = 1\n", &dir.join("s.toml")).unwrap(),
            None
        );
        // A model without the kind's table says so.
        std::fs::write(dir.join("k.toml"), "[kv_transfer]\nprefill_us_per_token = 1\n").unwrap();
        let e = merge("[workloads.d.moe]\nmodel = \"k.toml\"\n", &dir.join("s.toml")).unwrap_err();
        assert!(e.message.contains("no `[moe]` table"), "{}", e.message);
        assert_eq!(e.line, Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
