//! The arbiter's rules on paused time: grants, standbys, lapse, takeover, the fence, release.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::object::ObjectJournal;

const TTL: Duration = Duration::from_secs(3);

fn memory() -> Arc<dyn JournalStore> {
    Arc::new(ObjectJournal::new(
        Arc::new(object_store::memory::InMemory::new()),
        "j",
        "memory://",
        1 << 20,
    ))
}

fn candidate(holder: &str) -> Candidate {
    Candidate {
        group: DEFAULT_GROUP.into(),
        holder: holder.into(),
        address: format!("http://{holder}"),
        ttl: TTL,
    }
}

async fn granted(a: &Arbiter, holder: &str) -> Term {
    match a.acquire(&candidate(holder)).await.expect("acquire") {
        Acquired::Granted(t) => t,
        Acquired::Held(t) => panic!("{holder} stands by behind {t:?}"),
    }
}

async fn held(a: &Arbiter, holder: &str) -> Term {
    match a.acquire(&candidate(holder)).await.expect("acquire") {
        Acquired::Held(t) => t,
        Acquired::Granted(t) => panic!("{holder} was granted {t:?}"),
    }
}

fn is_fenced(e: &JournalError) -> bool {
    matches!(e, JournalError::Fenced { .. })
}

#[tokio::test(start_paused = true)]
async fn one_holder_others_stand_by_until_it_lapses() {
    let a = Arbiter::new(memory());
    let first = granted(&a, "a").await;
    assert_eq!(first.epoch, 1);
    let standby = held(&a, "b").await;
    assert_eq!((standby.holder.as_str(), standby.epoch), ("a", 1));
    assert_eq!(standby.address, "http://a");

    // Renewals keep it: however long, as long as they come within the ttl.
    for _ in 0..5 {
        tokio::time::advance(TTL / 2).await;
        a.renew(&first).await.expect("renew");
        held(&a, "b").await;
    }
    a.admit(DEFAULT_GROUP, 1).await.expect("the holder writes");

    // The holder stops renewing: past the ttl the standby takes over with a new epoch.
    tokio::time::advance(TTL).await;
    let second = granted(&a, "b").await;
    assert_eq!(second.epoch, 2);
    let e = a.admit(DEFAULT_GROUP, 1).await.expect_err("old epoch");
    assert!(is_fenced(&e), "{e}");
    assert!(
        e.to_string().contains("epoch 2 of b holds the lease"),
        "{e}"
    );
    let e = a.renew(&first).await.expect_err("old term renews");
    assert!(is_fenced(&e), "{e}");
    a.admit(DEFAULT_GROUP, 2)
        .await
        .expect("the new holder writes");
}

#[tokio::test(start_paused = true)]
async fn a_holder_stops_writing_before_its_lease_could_lapse_elsewhere() {
    let a = Arbiter::new(memory());
    granted(&a, "a").await;
    tokio::time::advance(TTL - margin(TTL) - Duration::from_millis(1)).await;
    a.admit(DEFAULT_GROUP, 1)
        .await
        .expect("still inside the ttl less the margin");
    tokio::time::advance(Duration::from_millis(1)).await;
    let e = a.admit(DEFAULT_GROUP, 1).await.expect_err("at the margin");
    assert!(e.to_string().contains("last renewed"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_takeover_waits_for_writes_in_flight_and_fences_later_ones() {
    let a = Arc::new(Arbiter::new(memory()));
    granted(&a, "a").await;
    let pass = a.admit(DEFAULT_GROUP, 1).await.expect("admitted");
    tokio::time::advance(TTL).await;
    let b = a.clone();
    let takeover = tokio::spawn(async move { granted(&b, "b").await });
    tokio::task::yield_now().await;
    assert!(
        !takeover.is_finished(),
        "the takeover waits for the write in flight"
    );
    drop(pass);
    assert_eq!(takeover.await.expect("joined").epoch, 2);
    assert!(is_fenced(
        &a.admit(DEFAULT_GROUP, 1).await.expect_err("fenced")
    ));
}

#[tokio::test(start_paused = true)]
async fn two_arbiters_over_one_store_never_grant_the_same_time() {
    // Two processes, each with its own arbiter: the compare-and-swap decides.
    let store = memory();
    let (x, y) = (Arbiter::new(store.clone()), Arbiter::new(store));
    let term = granted(&x, "a").await;
    held(&y, "b").await;
    // y first saw this version now; x keeps renewing: y never sees it unchanged for a ttl.
    for _ in 0..4 {
        tokio::time::advance(TTL / 3).await;
        x.renew(&term).await.expect("renew");
        held(&y, "b").await;
    }
    // x stops: y must wait a whole ttl from when it first saw the last version.
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    held(&y, "b").await;
    tokio::time::advance(Duration::from_millis(1)).await;
    let second = granted(&y, "b").await;
    assert_eq!(second.epoch, 2);
    // x's next renewal loses the compare-and-swap, and its writes are refused.
    assert!(is_fenced(&x.renew(&term).await.expect_err("taken over")));
    assert!(is_fenced(
        &x.admit(DEFAULT_GROUP, 1).await.expect_err("deposed")
    ));
    // And x, asked again, sees b holding it.
    assert_eq!(held(&x, "a").await.holder, "b");
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_free_at_once() {
    let a = Arbiter::new(memory());
    let first = granted(&a, "a").await;
    a.release(&first).await.expect("release");
    assert!(is_fenced(
        &a.admit(DEFAULT_GROUP, 1).await.expect_err("released")
    ));
    assert_eq!(granted(&a, "b").await.epoch, 2);
    // Releasing a stale term is a no-op.
    a.release(&first).await.expect("stale release");
    a.admit(DEFAULT_GROUP, 2).await.expect("b still holds it");
}

#[tokio::test(start_paused = true)]
async fn the_same_holder_gets_a_new_epoch_at_once() {
    let a = Arbiter::new(memory());
    granted(&a, "a").await;
    assert_eq!(granted(&a, "a").await.epoch, 2);
    assert!(is_fenced(
        &a.admit(DEFAULT_GROUP, 1).await.expect_err("old epoch")
    ));
}

#[tokio::test]
async fn bad_candidates_and_records_are_refused_by_name() {
    let store = memory();
    let a = Arbiter::new(store.clone());
    let mut c = candidate("a");
    c.ttl = Duration::from_millis(10);
    let e = a.acquire(&c).await.expect_err("ttl");
    assert!(e.to_string().contains("leadership ttl"), "{e}");
    let mut c = candidate("a/../b");
    c.ttl = TTL;
    assert!(a.acquire(&c).await.is_err());
    store
        .write_control(
            "leader-orchestrator",
            Bytes::from_static(b"{\"not\":1}"),
            None,
        )
        .await
        .expect("write garbage");
    let e = a.acquire(&candidate("a")).await.expect_err("garbage lease");
    assert!(e.to_string().contains("leader-orchestrator"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_arbiter_adopts_the_holders_renewal_and_refuses_anyone_elses() {
    // The journal service restarted: a fresh arbiter over the same store.
    let store = memory();
    let before = Arbiter::new(store.clone());
    let term = granted(&before, "a").await;
    let after = Arbiter::new(store);
    // Before the holder renews there, the new arbiter admits nothing of it.
    assert!(is_fenced(
        &after
            .admit(DEFAULT_GROUP, 1)
            .await
            .expect_err("unknown here")
    ));
    after
        .renew(&term)
        .await
        .expect("the holder renews through the new arbiter");
    after
        .admit(DEFAULT_GROUP, 1)
        .await
        .expect("and writes again");
    // A stale term, or another holder's, is refused.
    let mut stale = term.clone();
    stale.epoch = 0;
    assert!(is_fenced(
        &after.renew(&stale).await.expect_err("stale epoch")
    ));
    let mut other = term.clone();
    other.holder = "b".into();
    assert!(is_fenced(
        &after.renew(&other).await.expect_err("not the holder")
    ));
    // And the old arbiter, if it still runs, lost the version: its next renewal is fenced.
    assert!(is_fenced(
        &before.renew(&term).await.expect_err("superseded version")
    ));
}
