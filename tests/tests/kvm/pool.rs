//! A pool's sandboxes over their lives: what a new one does before its first request.

use hyperlightd_client::ExecStatus;
use hyperlightd_e2e::{Daemon, js, metric, run};
use serde_json::json;

const PRIMED: &str = r#"hyperlightd_sandbox_prime_seconds_count{language="javascript"}"#;
const RESTORED: &str = r#"hyperlightd_sandbox_restore_seconds_count{language="javascript"}"#;

/// A new sandbox runs its language's priming program once, off a request's path, before its
/// first request (its first call maps into the VM every page it touches), whatever `--prime`
/// says of the calls after each restore: with `never`, the restores after its requests are
/// not followed by any.
#[tokio::test]
async fn a_new_sandbox_is_primed_once_before_its_first_request_even_with_prime_never() {
    let daemon = Daemon::start(&["--pool", "javascript=2", "--prime", "never"]).await;
    daemon
        .wait_for_metrics("both new sandboxes primed", |metrics| {
            metric(metrics, PRIMED) >= 2.0
        })
        .await;
    for i in 0..4 {
        let answer = run(&daemon, js(&format!("{i} * 2"))).await;
        assert_eq!(answer.status, ExecStatus::Ok, "{answer:?}");
        assert_eq!(answer.result, json!(i * 2), "{answer:?}");
    }
    daemon
        .wait_for_metrics(
            "the sandboxes restored after the four requests",
            |metrics| metric(metrics, RESTORED) >= 4.0,
        )
        .await;
    assert_eq!(
        daemon.metric(PRIMED).await,
        2.0,
        "with --prime never, only the new sandboxes were primed"
    );
}
