//! `THROUGHPUT_STACK=containers` (or `both`): the throughput workload against the service
//! images (`babysitter_tests::stack`: one container per service on a bridge network, settings
//! of `deploy/compose/`, the same short leases as the process stack: `SHORT_LEASES`), so containers and
//! processes can be compared side by side; and each service's cold start in its container.

use std::time::Duration;

use babysitter_tests::stack::{ContainerStack, SHORT_LEASES, TOKENS};

use super::{Figures, Target, measure};

fn token(name: &str) -> &'static str {
    TOKENS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("a stack token")
}

async fn stack(workers: usize) -> ContainerStack {
    ContainerStack::start(workers, &SHORT_LEASES)
        .await
        .expect("container stack")
        .expect("BABYSITTER_IT_DOCKER=1 and the images (deploy/images/build.sh)")
}

/// The workload on a container stack with `workers` workers.
pub async fn one(workers: usize, runs: usize, tasks: usize) -> Figures {
    let stack = stack(workers).await;
    let c = super::cluster::run_client(&stack.url(), Some(token("client")));
    let target = Target {
        journal: stack.journal.addr(),
        journal_token: Some(token("journal")),
        ledger_host: stack.ledger(),
        ledger_in_task: "/ledger/ledger".to_owned(),
    };
    measure(c, &target, runs, tasks).await
}

/// Waits until the server at `addr` reports SERVING (overall health); how long it took.
async fn serving(addr: &str, from: tokio::time::Instant) -> Duration {
    use tonic_health::pb::health_check_response::ServingStatus;
    loop {
        if super::cluster::health_of(addr, "").await == Some(ServingStatus::Serving as i32) {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < Duration::from_secs(60),
            "{addr} never SERVING"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Each service's start in its container (a stopped container started again: namespaces,
/// mounts, the process, its config and connections) until it is ready: gRPC health SERVING for
/// the journal, the orchestrator (the journal's lease granted: it waits out the killed one's
/// TTL, 2 s here) and the transport proxy's control API; for a worker, its "serving kinds" line
/// (it has no server of its own by default). Printed, `rounds` times each.
pub async fn cold_starts(rounds: usize) {
    let mut stack = stack(1).await;
    stack.add_proxy().await.expect("transport proxy container");
    for round in 1..=rounds {
        let proxy = stack.proxy.as_ref().expect("the proxy");
        for (name, svc) in [
            ("journal", &stack.journal),
            ("orchestrator", &stack.orchestrator),
            ("transport-proxy", proxy),
        ] {
            svc.kill().await.expect("kill");
            let t0 = tokio::time::Instant::now();
            svc.restart().await.expect("restart");
            let took = serving(&svc.addr(), t0).await;
            println!(
                "cold start, round {round}: {name:<16} {:>6.0} ms to SERVING",
                took.as_secs_f64() * 1000.0
            );
        }
        let w = &stack.workers[0];
        let before = w.stderr().await.matches("serving kinds").count();
        w.kill().await.expect("kill");
        let t0 = tokio::time::Instant::now();
        w.restart().await.expect("restart");
        while w.stderr().await.matches("serving kinds").count() <= before {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "worker never started"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "cold start, round {round}: harness-launcher {:>6.0} ms to its start line (it serves no health by default)",
            t0.elapsed().as_secs_f64() * 1000.0
        );
    }
}
