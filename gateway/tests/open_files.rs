//! `raise_open_files_limit` in a test binary of its own: it changes a limit of the whole process.

use rustix::process::{getrlimit, setrlimit, Resource};
use tower_chat_gateway::connection::raise_open_files_limit;

/// Connections are file descriptors: a gateway started with a low soft limit raises it to the hard limit.
#[test]
fn a_low_soft_open_files_limit_is_raised_to_the_hard_limit() {
    let start = getrlimit(Resource::Nofile);
    let Some(hard) = start.maximum.filter(|&hard| hard > 256) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test: hard open-files limit {:?}",
            start.maximum
        );
        eprintln!(
            "SKIPPED: the hard open-files limit ({:?}) leaves nothing to raise",
            start.maximum
        );
        return;
    };
    let mut low = start;
    low.current = Some(256);
    setrlimit(Resource::Nofile, low).expect("lowering the soft limit");
    assert_eq!(raise_open_files_limit(), Some(hard));
    assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
    // Already at the hard limit: nothing to change, the limit is still reported.
    assert_eq!(raise_open_files_limit(), Some(hard));
}
