//! Queue and lease rules under paused tokio time.

use super::*;

fn config() -> QueueConfig {
    QueueConfig {
        lease_duration: Duration::from_secs(10),
        heartbeat_interval: Duration::from_secs(3),
        max_poll_wait: Duration::from_secs(20),
        max_attempts: 3,
        retry_backoff: Duration::from_secs(1),
        retry_backoff_max: Duration::from_secs(8),
        per_run_limit: 2,
        per_namespace_limit: 100,
    }
}

fn spec(run: &str, effect: &str, kind: &str) -> TaskSpec {
    TaskSpec {
        namespace: "default".into(),
        run_id: run.into(),
        effect_id: effect.into(),
        task_id: "t".into(),
        invocation_key: format!("p:{effect}"),
        kind: kind.into(),
        label: String::new(),
        task_json: Bytes::from_static(b"{}"),
        harness: None,
        required_labels: BTreeMap::new(),
        timeout: None,
        trace: None,
        session_file: None,
    }
}

fn shell_worker(q: &TaskQueue, id: &str) -> String {
    q.register(
        id,
        vec![],
        Capabilities {
            task_kinds: vec!["shell".into()],
            ..Default::default()
        },
    )
}

#[tokio::test(start_paused = true)]
async fn lease_complete_and_idempotent_repeat() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    q.enqueue(spec("r1", "e1", "shell"), false);
    let got = q.poll(&w, 4, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attempt, 1);
    let lease = got[0].lease_id.clone();
    assert!(lease.starts_with("INC1:r1:e1:1:"), "{lease}");
    assert_eq!(lease_attempt(&lease), Some(1));
    assert!(matches!(
        q.begin_completion(&w, &lease, "e1").unwrap(),
        Completion::Proceed(_)
    ));
    q.completed(&lease);
    assert!(matches!(
        q.begin_completion(&w, &lease, "e1").unwrap(),
        Completion::AlreadyCompleted
    ));
    assert!(!q.is_known("r1", "e1"));
}

#[tokio::test(start_paused = true)]
async fn expired_lease_goes_back_with_backoff_and_its_completion_is_refused() {
    let q = TaskQueue::new(config(), "INC1");
    let w1 = shell_worker(&q, "w1");
    let w2 = shell_worker(&q, "w2");
    q.enqueue(spec("r1", "e1", "shell"), false);
    let first = q.poll(&w1, 1, Duration::ZERO).await.unwrap().remove(0);
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(q.expire().is_empty());
    // Backoff: not offered at once.
    assert!(q.poll(&w2, 1, Duration::ZERO).await.unwrap().is_empty());
    let second = q
        .poll(&w2, 1, Duration::from_secs(5))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(second.attempt, 2);
    assert_eq!(lease_attempt(&second.lease_id), Some(2));
    let err = q.begin_completion(&w1, &first.lease_id, "e1").unwrap_err();
    assert!(matches!(err, QueueError::LeaseLost { .. }), "{err:?}");
    assert!(matches!(
        q.begin_completion(&w2, &second.lease_id, "e1").unwrap(),
        Completion::Proceed(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_a_lease_alive() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    q.enqueue(spec("r1", "e1", "shell"), false);
    let a = q.poll(&w, 1, Duration::ZERO).await.unwrap().remove(0);
    for _ in 0..10 {
        tokio::time::advance(Duration::from_secs(3)).await;
        let v = q.heartbeat(&w, std::slice::from_ref(&a.lease_id)).unwrap();
        assert!(matches!(v[0], LeaseVerdict::Active { .. }), "{v:?}");
        assert!(q.expire().is_empty());
    }
    assert!(matches!(
        q.begin_completion(&w, &a.lease_id, "e1").unwrap(),
        Completion::Proceed(_)
    ));
    let v = q.heartbeat("w1", &["INC1:r9:e9:1:00".into()]).unwrap();
    assert!(matches!(v[0], LeaseVerdict::Lost { .. }));
    assert_eq!(
        q.heartbeat("nobody", &[]).unwrap_err(),
        QueueError::UnknownWorker("nobody".into())
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_run_out() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    q.enqueue(spec("r1", "e1", "shell"), false);
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        let a = q.poll(&w, 1, Duration::from_secs(20)).await.unwrap();
        assert_eq!(a.len(), 1);
        tokio::time::advance(Duration::from_secs(11)).await;
        gave_up = q.expire();
    }
    assert_eq!(gave_up.len(), 1);
    assert_eq!(gave_up[0].attempts, 3);
    assert!(!q.is_known("r1", "e1"));
}

#[tokio::test(start_paused = true)]
async fn grants_expiries_and_give_ups_are_counted_and_the_queue_is_seen_by_a_scrape() {
    // A namespace of its own: the registry is the process's, shared with the other tests.
    let series = |name: &str| format!("{name}{{kind=\"shell\",namespace=\"metrics-test\"}}");
    let value = |text: &str, s: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(s)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    let mut task = spec("r1", "e1", "shell");
    task.namespace = "metrics-test".into();
    q.enqueue(task, false);
    let queued = "babysitter_orchestrator_queue_tasks{kind=\"shell\",namespace=\"metrics-test\",state=\"queued\"}";
    assert_eq!(value(&babysitter_common::metrics::render(), queued), 1.0);
    for _ in 0..3 {
        assert_eq!(
            q.poll(&w, 1, Duration::from_secs(20)).await.unwrap().len(),
            1
        );
        tokio::time::advance(Duration::from_secs(11)).await;
        q.expire();
    }
    let text = babysitter_common::metrics::render();
    let granted = series("babysitter_orchestrator_leases_granted_total");
    let expired = series("babysitter_orchestrator_leases_expired_total");
    let gave_up = series("babysitter_orchestrator_tasks_given_up_total");
    assert_eq!(value(&text, &granted), 3.0, "{text}");
    assert_eq!(value(&text, &expired), 3.0, "{text}");
    assert_eq!(value(&text, &gave_up), 1.0, "{text}");
    assert_eq!(value(&text, queued), 0.0, "given up: gone from the queue");
    // Retries wait out their backoff: the dispatch latency counts from when a task was ready.
    let latency = series("babysitter_orchestrator_dispatch_latency_seconds_sum");
    assert_eq!(
        value(&text, &latency),
        0.0,
        "each lease granted the moment it was polled"
    );
}

#[tokio::test(start_paused = true)]
async fn routing_by_kind_harness_labels_and_namespace() {
    let q = TaskQueue::new(config(), "INC1");
    let gpu = q.register(
        "gpu",
        vec!["team-a".into()],
        Capabilities {
            task_kinds: vec!["agent".into()],
            harnesses: vec!["codex".into()],
            labels: [("gpu".to_owned(), "true".to_owned())].into(),
            max_concurrency: 1,
        },
    );
    let plain = shell_worker(&q, "plain");
    let mut needs = spec("r1", "e1", "agent");
    needs.namespace = "team-a".into();
    needs.harness = Some("codex".into());
    needs.required_labels = [("gpu".to_owned(), "true".to_owned())].into();
    q.enqueue(needs, false);
    let mut other_ns = spec("r2", "e2", "agent");
    other_ns.namespace = "team-b".into();
    q.enqueue(other_ns, false);
    assert!(q.poll(&plain, 5, Duration::ZERO).await.unwrap().is_empty());
    let got = q.poll(&gpu, 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spec.effect_id, "e1");
    let unroutable = q.unroutable();
    assert_eq!(unroutable.len(), 1);
    assert_eq!(unroutable[0].0.effect_id, "e2");
    assert!(unroutable[0].1.contains("team-b"), "{}", unroutable[0].1);
}

#[tokio::test(start_paused = true)]
async fn long_poll_wakes_on_enqueue() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    let q2 = q.clone();
    let poller = tokio::spawn(async move { q2.poll("w1", 1, Duration::from_secs(20)).await });
    tokio::time::advance(Duration::from_secs(2)).await;
    q.enqueue(spec("r1", "e1", "shell"), false);
    let got = poller.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    // And an empty answer after the wait.
    assert!(
        q.poll(&w, 1, Duration::from_secs(3))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn per_run_limit_caps_leases() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    for i in 0..5 {
        q.enqueue(spec("r1", &format!("e{i}"), "shell"), false);
    }
    q.enqueue(spec("r2", "x", "shell"), false);
    let got = q.poll(&w, 10, Duration::ZERO).await.unwrap();
    let r1 = got.iter().filter(|a| a.spec.run_id == "r1").count();
    assert_eq!(r1, 2, "per-run limit");
    assert_eq!(got.len(), 3);
    q.begin_completion(&w, &got[0].lease_id, &got[0].spec.effect_id)
        .unwrap();
    q.completed(&got[0].lease_id);
    assert_eq!(q.poll(&w, 10, Duration::ZERO).await.unwrap().len(), 1);
}

/// A lease that worker `w1` took for `run`/`effect` from an orchestrator before a restart.
async fn lease_of_a_previous_incarnation(run: &str, effect: &str) -> String {
    let old = TaskQueue::new(config(), "OLD");
    let w = shell_worker(&old, "w1");
    old.enqueue(spec(run, effect, "shell"), false);
    old.poll(&w, 1, Duration::ZERO)
        .await
        .unwrap()
        .remove(0)
        .lease_id
}

#[tokio::test(start_paused = true)]
async fn recovered_tasks_are_adopted_by_their_old_lease() {
    let lease = lease_of_a_previous_incarnation("r1", "e1").await;

    // The orchestrator restarts: the queue is rebuilt from the journal.
    let q = TaskQueue::new(config(), "NEW");
    let w = shell_worker(&q, "w1");
    let other = shell_worker(&q, "w2");
    q.enqueue(spec("r1", "e1", "shell"), true);
    q.enqueue(spec("r1", "e2", "shell"), true);
    assert!(
        q.poll(&other, 5, Duration::ZERO).await.unwrap().is_empty(),
        "held for adoption"
    );
    let v = q.heartbeat(&w, std::slice::from_ref(&lease)).unwrap();
    assert!(matches!(v[0], LeaseVerdict::Active { .. }), "{v:?}");
    // Nobody claims e2: after the grace period it is an ordinary task.
    tokio::time::advance(Duration::from_secs(6)).await;
    q.heartbeat(&w, std::slice::from_ref(&lease)).unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(q.expire().is_empty());
    let got = q.poll(&other, 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].spec.effect_id, "e2");
    assert!(matches!(
        q.begin_completion(&w, &lease, "e1").unwrap(),
        Completion::Proceed(_)
    ));
    // A lease of the current incarnation that it never issued is not adoptable.
    let err = q.begin_completion(&w, "NEW:r1:e2:1:ff", "e2").unwrap_err();
    assert!(matches!(err, QueueError::LeaseLost { .. }));
}

#[tokio::test(start_paused = true)]
async fn the_adoption_grace_starts_when_workers_can_reach_the_queue_not_at_recovery() {
    let lease = lease_of_a_previous_incarnation("r1", "e1").await;

    // Recovery takes longer than a lease (many runs, a loaded machine): nothing is served yet.
    let q = TaskQueue::new(config(), "NEW");
    q.hold_adoption();
    q.enqueue(spec("r1", "e1", "shell"), true);
    tokio::time::advance(Duration::from_secs(25)).await;
    assert!(q.expire().is_empty());
    q.open_adoption();
    let w = shell_worker(&q, "w1");
    let other = shell_worker(&q, "w2");
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(q.expire().is_empty());
    assert!(
        q.poll(&other, 5, Duration::ZERO).await.unwrap().is_empty(),
        "still held: its worker has had 9 s of the 10 s grace to come back"
    );
    assert!(matches!(
        q.begin_completion(&w, &lease, "e1").unwrap(),
        Completion::Proceed(_)
    ));

    // A task recovered after the queue opened gets the whole grace from then on.
    q.enqueue(spec("r2", "e1", "shell"), true);
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(q.poll(&other, 5, Duration::ZERO).await.unwrap().is_empty());
    tokio::time::advance(Duration::from_secs(2)).await;
    q.expire();
    let got = q.poll(&other, 5, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 1, "nobody adopted it within the grace");
    assert_eq!(got[0].spec.run_id, "r2");
}

#[tokio::test(start_paused = true)]
async fn cancelled_runs_tell_their_workers() {
    let q = TaskQueue::new(config(), "INC1");
    let w = shell_worker(&q, "w1");
    q.enqueue(spec("r1", "e1", "shell"), false);
    q.enqueue(spec("r1", "e2", "shell"), false);
    q.enqueue(spec("r1", "e3", "shell"), false);
    let a = q.poll(&w, 1, Duration::ZERO).await.unwrap().remove(0);
    // Another run's task, queued after: cancelling r1 leaves it alone.
    q.enqueue(spec("r2", "e9", "shell"), false);
    let mut ids = q.cancel_run("r1", "user asked");
    ids.sort();
    assert_eq!(ids, ["e1", "e2", "e3"]);
    let v = q.heartbeat(&w, std::slice::from_ref(&a.lease_id)).unwrap();
    assert_eq!(
        v[0],
        LeaseVerdict::Cancelled {
            reason: "user asked".into()
        }
    );
    assert_eq!(q.counts_for_run("r1"), (0, 1));
    assert_eq!(q.counts_for_run("r2"), (1, 0));
    let next = q.poll(&w, 1, Duration::ZERO).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        (
            next[0].spec.run_id.as_str(),
            next[0].spec.effect_id.as_str()
        ),
        ("r2", "e9")
    );
}

#[tokio::test(start_paused = true)]
async fn completion_rules() {
    let q = TaskQueue::new(config(), "INC1");
    let w1 = shell_worker(&q, "w1");
    let w2 = shell_worker(&q, "w2");
    q.enqueue(spec("r1", "e1", "shell"), false);
    let a = q.poll(&w1, 1, Duration::ZERO).await.unwrap().remove(0);
    assert!(matches!(
        q.begin_completion(&w2, &a.lease_id, "e1").unwrap_err(),
        QueueError::LeaseLost { .. }
    ));
    assert!(matches!(
        q.begin_completion(&w1, &a.lease_id, "zz").unwrap_err(),
        QueueError::EffectMismatch { .. }
    ));
    assert!(matches!(
        q.begin_completion(&w1, &a.lease_id, "e1").unwrap(),
        Completion::Proceed(_)
    ));
    // The journal write failed: the lease is live again and the retry proceeds.
    q.completion_failed(&a.lease_id);
    assert!(matches!(
        q.begin_completion(&w1, &a.lease_id, "e1").unwrap(),
        Completion::Proceed(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_worker_gets_no_more_than_its_max_concurrency() {
    let q = TaskQueue::new(config(), "INC1");
    let w = q.register(
        "small",
        vec![],
        Capabilities {
            task_kinds: vec!["shell".into()],
            max_concurrency: 2,
            ..Default::default()
        },
    );
    for i in 0..3 {
        q.enqueue(spec(&format!("r{i}"), "e", "shell"), false);
    }
    let got = q.poll(&w, 10, Duration::ZERO).await.unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        q.poll(&w, 10, Duration::ZERO).await.unwrap().is_empty(),
        "full"
    );
    q.begin_completion(&w, &got[0].lease_id, "e").unwrap();
    q.completed(&got[0].lease_id);
    assert_eq!(
        q.poll(&w, 10, Duration::ZERO).await.unwrap().len(),
        1,
        "a slot freed"
    );
}
