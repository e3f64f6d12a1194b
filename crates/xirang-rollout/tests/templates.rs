//! Values read from hosts never become shell code: every built-in and documented command
//! template is filled with arbitrary strings (quotes, `;`, `$( )`, backquotes, newlines,
//! NUL, unicode) and run by `sh` with fake `ssh`, `mlxfwmanager`, `mlxfwreset` and
//! `xirang` that record their argv. The fake `ssh` hands its command to `sh -c` with its
//! arguments joined by spaces, as sshd hands it to the user's shell, so the "remote" side
//! parses the line again. Exactly the intended programs must run, with exactly the
//! intended arguments, on both sides, and nothing else may print.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use xirang_rollout::policy::{Commands, Policy, fill};

/// Records `argv[0]`'s name, the argument count and the arguments, NUL-separated (an
/// argument cannot hold a NUL, so the log cannot be forged by a value).
const RECORD: &str = "printf '%s\\000' \"${0##*/}\" \"$#\" \"$@\" >> \"$XLOG\"\n";

fn fakes(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{RECORD}{body}")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // The templates under test pass ssh no options: the destination, then the command.
    write("ssh", "shift\nexec /bin/sh -c \"$*\"\n");
    write("mlxfwmanager", "");
    write("mlxfwreset", "");
    write("xirang", "printf 'SNAPSHOT'\n");
    std::fs::create_dir_all(dir.join("hosts")).unwrap();
}

type Call = (String, Vec<String>);
type Values = BTreeMap<&'static str, String>;

fn calls(log: &[u8]) -> Vec<Call> {
    let fields: Vec<String> = log
        .split(|&b| b == 0)
        .map(|f| String::from_utf8(f.to_vec()).unwrap())
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < fields.len() {
        let n: usize = fields[i + 1].parse().unwrap();
        out.push((fields[i].clone(), fields[i + 2..i + 2 + n].to_vec()));
        i += 2 + n;
    }
    out
}

/// Runs `line` as the executor does (`sh -c` in the inventory directory) with only the
/// fakes on PATH: any other program fails to start and shows on stderr.
fn run(dir: &Path, line: &str) -> (Vec<Call>, String) {
    let log = dir.join("calls.log");
    let _ = std::fs::remove_file(&log);
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env_clear()
        .env("PATH", dir.join("bin"))
        .env("XLOG", &log)
        .output()
        .unwrap();
    let printed = format!(
        "status {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{line}: {printed}"
    );
    (calls(&std::fs::read(&log).unwrap_or_default()), printed)
}

struct Case {
    name: &'static str,
    template: String,
    /// The calls the template means, for the values given.
    expect: fn(&Values) -> Vec<Call>,
    /// Files it must write (relative path, content).
    writes: fn(&Values) -> Vec<(String, String)>,
    /// The node name becomes a file name: only names the grammar check admits.
    hostname_only: bool,
}

fn s(x: &str) -> String {
    x.to_string()
}

fn flash_calls(v: &BTreeMap<&'static str, String>, image: String) -> Vec<Call> {
    vec![
        (s("ssh"), vec![v["node"].clone(), s("<remote>")]),
        (
            s("mlxfwmanager"),
            vec![s("-d"), v["pci"].clone(), s("-i"), image, s("-u"), s("-y")],
        ),
        (
            s("mlxfwreset"),
            vec![s("-d"), v["pci"].clone(), s("-y"), s("reset")],
        ),
    ]
}

fn cases() -> Vec<Case> {
    let builtin = Commands::ssh_mlxfwmanager();
    let shipped = Policy::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test_data/policy.toml"
    )))
    .unwrap();
    vec![
        Case {
            name: "built-in flash",
            template: builtin.flash,
            expect: |v| flash_calls(v, v["image"].clone()),
            writes: |_| vec![],
            hostname_only: false,
        },
        Case {
            name: "built-in rollback",
            template: builtin.rollback,
            expect: |v| {
                flash_calls(
                    v,
                    format!("/srv/firmware/{}-{}.bin", v["board_id"], v["previous"]),
                )
            },
            writes: |_| vec![],
            hostname_only: false,
        },
        Case {
            name: "test_data/policy.toml flash",
            template: shipped.commands.flash,
            expect: |v| flash_calls(v, v["image"].clone()),
            writes: |_| vec![],
            hostname_only: false,
        },
        Case {
            name: "test_data/policy.toml rollback",
            template: shipped.commands.rollback,
            expect: |v| {
                flash_calls(
                    v,
                    format!("/srv/firmware/fw-ConnectX6Dx-rel-{}.bin", v["previous"]),
                )
            },
            writes: |_| vec![],
            hostname_only: false,
        },
        Case {
            name: "README flash",
            template: s(README_FLASH),
            expect: |v| {
                vec![
                    (s("ssh"), vec![v["node"].clone(), s("<remote>")]),
                    (
                        s("mlxfwmanager"),
                        vec![
                            s("-d"),
                            v["pci"].clone(),
                            s("-i"),
                            v["image"].clone(),
                            s("-u"),
                            s("-y"),
                        ],
                    ),
                ]
            },
            writes: |_| vec![],
            hostname_only: false,
        },
        Case {
            name: "documented collect",
            template: s(DOC_COLLECT),
            expect: |v| {
                vec![
                    (s("ssh"), vec![v["node"].clone(), s("<remote>")]),
                    (s("xirang"), vec![s("host"), s("snapshot"), s("-o"), s("-")]),
                ]
            },
            writes: |v| vec![(format!("hosts/{}.tar.gz", v["node"]), s("SNAPSHOT"))],
            hostname_only: true,
        },
    ]
}

const README_FLASH: &str = "ssh {node} 'mlxfwmanager -d {pci} -i {image} -u -y'";
const DOC_COLLECT: &str = "ssh {node} xirang host snapshot -o - > hosts/{node}.tar.gz";

#[test]
fn the_documented_templates_are_the_ones_tested() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/formats/rollout-policy.md"
    ))
    .unwrap();
    assert!(
        readme.contains(README_FLASH),
        "the rollout policy format's flash example changed: test the new one"
    );
    let policy_rs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/policy.rs")).unwrap();
    assert!(
        policy_rs.contains(DOC_COLLECT),
        "the documented collect example changed: test the new one"
    );
}

/// Strings made to break quoting, mixed with arbitrary unicode.
fn hostile() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "'",
        "\"",
        ";",
        "$(",
        ")",
        "`",
        "\n",
        "\\",
        " ",
        "\t",
        "&&",
        "|",
        "*",
        "~",
        "-",
        "--",
        "\0",
        "é",
        "{node}",
        "%s",
        "#",
        "'\\''",
        "$HOME",
        ">",
        "<",
        "&",
        "!",
        "{",
        "}",
        "=",
        "0000:01:00.0",
    ]);
    prop_oneof![
        any::<String>(),
        prop::collection::vec(pieces, 0..8).prop_map(|v| v.concat()),
    ]
}

/// Host names as the grammar check lets them through (the collect template writes a
/// file named after the node).
fn hostname() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,12}(\\.[a-z0-9]{1,6}){0,2}"
}

fn check(case: &Case, v: &BTreeMap<&'static str, String>, dir: &Path) -> Result<(), TestCaseError> {
    let line = fill(&case.template, v);
    if v.values().any(|x| x.contains('\0')) {
        prop_assert!(line.is_err(), "{}: a NUL was accepted", case.name);
        return Ok(());
    }
    if v["node"].starts_with('-') {
        prop_assert!(
            line.is_err(),
            "{}: an ssh destination starting with - was accepted",
            case.name
        );
        return Ok(());
    }
    let line = line.map_err(|e| TestCaseError::fail(format!("{}: {e}", case.name)))?;
    for (f, _) in (case.writes)(v) {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let (mut got, printed) = run(dir, &line);
    // What ssh is handed is checked by what runs at the other end.
    if let Some((prog, args)) = got.first_mut()
        && prog == "ssh"
        && args.len() == 2
    {
        args[1] = s("<remote>");
    }
    prop_assert_eq!(got, (case.expect)(v), "{}: {} -> {}", case.name, line, printed);
    for (f, content) in (case.writes)(v) {
        prop_assert_eq!(
            std::fs::read_to_string(dir.join(&f)).unwrap_or_default(),
            content,
            "{}",
            f
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn hostile_values_stay_data_on_both_sides_of_ssh(
        node in hostile(),
        safe_node in hostname(),
        pci in hostile(),
        board_id in hostile(),
        image in hostile(),
        previous in hostile(),
        nic in hostile(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        fakes(dir.path());
        for case in cases() {
            let node = if case.hostname_only { safe_node.clone() } else { node.clone() };
            let mut v = BTreeMap::new();
            for (k, x) in [
                ("node", node),
                ("pci", pci.clone()),
                ("board_id", board_id.clone()),
                ("image", image.clone()),
                ("previous", previous.clone()),
                ("nic", nic.clone()),
                ("target", s("22.39.1002")),
                ("hca_type", s("MT4125")),
            ] {
                v.insert(k, x);
            }
            check(&case, &v, dir.path())?;
        }
    }
}

#[test]
fn the_issues_reproduction_runs_one_command_on_each_side() {
    let dir = tempfile::tempdir().unwrap();
    fakes(dir.path());
    let mut v: BTreeMap<&'static str, String> = BTreeMap::new();
    v.insert("node", s("n1"));
    v.insert("pci", s("0000:01:00.0;echo INJECTED"));
    v.insert("image", s("fw.bin"));
    let line = fill(&Commands::ssh_mlxfwmanager().flash, &v).unwrap();
    let (got, _) = run(dir.path(), &line);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[1].1[1], "0000:01:00.0;echo INJECTED");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The template parser takes the operator's text: any string either parses or gives a
    /// column and a reason, and a parsed template renders any values without panicking.
    #[test]
    fn any_template_parses_or_says_where_and_renders_any_values(
        t in prop_oneof![
            any::<String>(),
            prop::collection::vec(prop::sample::select(vec![
                "ssh ", "{node} ", "'", "\"", "sh -c ", "sudo ", "-o ", "x ", "&& ", "| ", "> ", "2>&1 ",
                "{pci}", "\\", "\n", "#", ";", "(", ")", "{", "}", "=", "A=b ",
            ]), 0..12).prop_map(|v| v.concat()),
        ],
        value in hostile(),
    ) {
        let mut v = BTreeMap::new();
        v.insert("node", s("n1"));
        v.insert("pci", value);
        match fill(&t, &v) {
            Ok(_) => {}
            Err(xirang_rollout::template::TemplateError::Syntax { column, what }) => {
                prop_assert!(column <= t.chars().count() + 1 && !what.is_empty());
            }
            Err(xirang_rollout::template::TemplateError::Value { .. }) => {}
        }
    }
}
