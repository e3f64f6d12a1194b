//! The file boundary's promises, on real special files: nothing blocks, nothing grows
//! past its limit, nothing but our own files is replaced.

use std::path::Path;
use std::process::Command;

use xirang_files::{
    Limit, OutputDir, ReadError, WriteError, read_bytes, read_text, read_text_lossy, write_atomic,
};

const SMALL: Limit = Limit::new(1024, "test file");

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo runs");
    assert!(st.success());
}

#[test]
fn a_fifo_without_a_writer_reads_as_empty_instead_of_blocking() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fifo");
    mkfifo(&p);
    assert_eq!(read_bytes(&p, SMALL).unwrap(), b"");
    let e = xirang_files::open_regular(&p).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: is a FIFO, expected a file", p.display())
    );
}

#[test]
fn a_fifo_with_a_writer_is_read_to_its_end() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fifo");
    mkfifo(&p);
    let writer = {
        let p = p.clone();
        // A reader that found no writer yet and closed makes this write fail (EPIPE):
        // write again, as the reader reads again.
        std::thread::spawn(move || while std::fs::write(&p, b"hello\n").is_err() {})
    };
    // The writer's open waits for a reader; ours must not wait for the writer, so read
    // again until the data arrives.
    let mut got = Vec::new();
    for _ in 0..1000 {
        got = read_bytes(&p, SMALL).unwrap();
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    writer.join().unwrap();
    assert_eq!(got, b"hello\n");
}

#[test]
fn endless_devices_stop_at_the_limit() {
    let e = read_bytes(Path::new("/dev/zero"), SMALL).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/dev/zero: larger than the 1 KiB a test file may have"
    );
    assert!(matches!(e, ReadError::TooLarge { .. }));
}

#[test]
fn a_large_regular_file_is_refused_without_reading_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big");
    std::fs::write(&p, vec![b'x'; 1025]).unwrap();
    assert!(matches!(read_bytes(&p, SMALL), Err(ReadError::TooLarge { .. })));
    std::fs::write(&p, vec![b'x'; 1024]).unwrap();
    assert_eq!(read_bytes(&p, SMALL).unwrap().len(), 1024);
}

#[test]
fn directories_are_refused_by_kind() {
    let d = tempfile::tempdir().unwrap();
    let e = read_text(d.path(), SMALL).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: is a directory, expected a file", d.path().display())
    );
}

#[test]
fn missing_files_say_so_once() {
    let e = read_text(Path::new("/nonexistent/x.toml"), SMALL).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/nonexistent/x.toml: cannot read: No such file or directory (os error 2)"
    );
    // The cause is in the message, so it is not also a source (anyhow's `{:#}` would
    // print it twice).
    assert!(std::error::Error::source(&e).is_none());
}

#[test]
fn invalid_utf8_names_its_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t");
    std::fs::write(&p, b"first\nsecond \xff line\nthird\n").unwrap();
    let e = read_text(&p, SMALL).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}:2: not UTF-8 text (an invalid byte at column 8)", p.display())
    );
    let lossy = read_text_lossy(&p, SMALL).unwrap();
    assert_eq!(lossy.first_invalid_line, Some(2));
    assert_eq!(lossy.text, "first\nsecond \u{fffd} line\nthird\n");
}

#[test]
fn write_atomic_refuses_to_replace_a_fifo_or_a_device() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fifo");
    mkfifo(&p);
    let e = write_atomic(&p, b"x").unwrap_err();
    assert!(matches!(e, WriteError::NotAFile { kind: "FIFO", .. }), "{e}");
    assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
    let e = write_atomic(Path::new("/dev/null"), b"x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/dev/null: is a character device; refusing to replace it with a file"
    );
    let e = write_atomic(d.path(), b"x").unwrap_err();
    assert!(
        matches!(
            e,
            WriteError::NotAFile {
                kind: "directory",
                ..
            }
        ),
        "{e}"
    );
}

use std::os::unix::fs::FileTypeExt;

#[test]
fn write_atomic_writes_through_a_symlink_and_leaves_no_temporary_file() {
    let d = tempfile::tempdir().unwrap();
    let real = d.path().join("real.env");
    std::fs::write(&real, b"old").unwrap();
    let link = d.path().join("link.env");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    write_atomic(&link, b"new").unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), b"new");
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

const OWN: &[&str] = &["a.csv", "b.csv", "summary.json"];

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_output_directory_is_replaced_as_a_whole() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let first = OutputDir::create(&out, OWN).unwrap();
    first.write("a.csv", b"1").unwrap();
    first.write("b.csv", b"1").unwrap();
    first.commit().unwrap();
    assert_eq!(names(&out), ["a.csv", "b.csv"]);

    // A second run that writes fewer files leaves none of the first run's behind.
    let second = OutputDir::create(&out, OWN).unwrap();
    second.write("a.csv", b"2").unwrap();
    // Until the commit, readers see the first run whole.
    assert_eq!(names(&out), ["a.csv", "b.csv"]);
    second.commit().unwrap();
    assert_eq!(names(&out), ["a.csv"]);
    assert_eq!(std::fs::read(out.join("a.csv")).unwrap(), b"2");
    // Nothing is left beside it.
    assert_eq!(names(d.path()), ["run"]);
}

#[test]
fn an_abandoned_output_leaves_the_previous_run_untouched() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("a.csv"), b"old").unwrap();
    {
        let w = OutputDir::create(&out, OWN).unwrap();
        w.write("a.csv", b"new").unwrap();
    }
    assert_eq!(std::fs::read(out.join("a.csv")).unwrap(), b"old");
    assert_eq!(names(d.path()), ["run"]);
}

#[test]
fn someone_elses_directory_is_refused_before_any_work() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("home");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("thesis.tex"), b"precious").unwrap();
    std::fs::write(out.join("a.csv"), b"1").unwrap();
    let e = OutputDir::create(&out, OWN).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: holds a file this command does not write (`thesis.tex`); give a new or empty directory",
            out.display()
        )
    );
    assert_eq!(names(&out), ["a.csv", "thesis.tex"]);
    assert_eq!(names(d.path()), ["home"]);
    // A file where the directory should be is refused too.
    let f = d.path().join("file");
    std::fs::write(&f, b"").unwrap();
    assert!(matches!(
        OutputDir::create(&f, OWN),
        Err(WriteError::NotAFile { kind: "file", .. })
    ));
}

#[test]
fn a_killed_runs_temporary_files_do_not_make_a_directory_foreign() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join(".a.csv.tmp"), b"half").unwrap();
    let w = OutputDir::create(&out, OWN).unwrap();
    w.write("summary.json", b"{}").unwrap();
    w.commit().unwrap();
    assert_eq!(names(&out), ["summary.json"]);
}

#[test]
fn databases_are_told_apart_by_their_header() {
    use xirang_files::{Database, database};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("db.sqlite");
    assert_eq!(database(&p).unwrap(), Database::Absent);
    std::fs::write(&p, b"").unwrap();
    assert_eq!(database(&p).unwrap(), Database::Empty);
    std::fs::write(&p, b"not a database at all").unwrap();
    assert_eq!(database(&p).unwrap(), Database::Other);
    std::fs::remove_file(&p).unwrap();
    let c = rusqlite::Connection::open(&p).unwrap();
    c.execute_batch("CREATE TABLE t (x); PRAGMA application_id = 1481790031;")
        .unwrap();
    drop(c);
    assert_eq!(
        database(&p).unwrap(),
        Database::Sqlite {
            application_id: 1_481_790_031
        }
    );
    let fifo = d.path().join("fifo");
    mkfifo(&fifo);
    assert!(matches!(
        database(&fifo),
        Err(ReadError::NotAFile { kind: "FIFO", .. })
    ));
}
