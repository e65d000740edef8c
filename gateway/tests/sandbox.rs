//! The read limit holds for a file holding more than its `fstat` size says (a file that grew after the check):
//! only one byte past the limit is read, and the file is refused, never returned cut at the limit.

use std::path::Path;

use tower_chat_gateway::tools::{Sandbox, MAX_READ_BYTES};

/// `/proc/kallsyms` is a regular file with one link whose `fstat` size is 0 but which holds megabytes of text:
/// to the sandbox it looks exactly like a file that grew between the `fstat` and the read.
#[tokio::test]
async fn a_file_larger_than_its_stat_size_is_refused_not_cut() {
    let proc = Path::new("/proc");
    let meta = std::fs::metadata(proc.join("kallsyms")).expect("/proc/kallsyms");
    assert!(meta.is_file() && meta.len() == 0, "{meta:?}");
    let mut content = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(proc.join("kallsyms")).unwrap(),
            MAX_READ_BYTES + 1,
        ),
        &mut content,
    )
    .unwrap();
    assert_eq!(
        content.len() as u64,
        MAX_READ_BYTES + 1,
        "the precondition: /proc/kallsyms holds more than the limit"
    );

    let sandbox = Sandbox::new(proc).unwrap();
    let error = sandbox.read("kallsyms").await.unwrap_err();
    assert!(
        error.message().contains("larger than the limit"),
        "{}",
        error.message()
    );
}
