//! Budgets shared through a real `redis-server` (`limits.store = "redis"`): two Gantry
//! processes admit one combined budget, in either era; while Redis is gone each rule
//! keeps its `on_store_error` policy; once Redis is back the limits hold again without
//! a restart; and a key Redis refused is refused locally until its wait is over.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_types
)]

mod common;

use common::redis::Redis;
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn store(redis: &Redis, rules: &str) -> String {
    format!(
        "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"{}\"\ntimeout = \"500ms\"\nretry_interval = \"200ms\"\n{rules}",
        redis.url()
    )
}

/// One Gantry in front of the example server with `rules` kept in `redis`, and an
/// initialized client.
async fn example_behind(redis: &Redis, rules: &str) -> (Gantry, Client) {
    let g = gantry()
        .section(&store(redis, rules))
        .backend(example())
        .start();
    let mut c = g.client();
    c.initialize().await;
    (g, c)
}

/// `tools/call` requests the backend received, for `tool` (any when `None`).
fn received(record: &std::path::Path, tool: Option<&str>) -> usize {
    recorded(record)
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .filter(|m| tool.is_none_or(|t| m["params"]["name"] == t))
        .count()
}

#[derive(Debug, PartialEq)]
enum Answer {
    Admitted,
    /// Rate limited: the message.
    Limited(String),
}

fn answer(r: &Value) -> Answer {
    if r["result"].is_object() && r["result"]["isError"] != true {
        return Answer::Admitted;
    }
    let e = &r["error"];
    assert_eq!(
        e["code"], -32029,
        "neither a result nor a rate-limit error: {r}"
    );
    assert!(e["data"]["retryAfterMs"].as_u64().unwrap() > 0, "{r}");
    Answer::Limited(e["message"].as_str().unwrap().to_owned())
}

/// A limit of 50 per minute admits 50 across two replicas — not 100 — and the
/// backends behind them received exactly the admitted calls.
#[tokio::test]
async fn two_gantries_sharing_one_redis_admit_one_budget_in_either_era() {
    let redis = Redis::start();
    let dir = Scratch::new("limits-redis");
    let rules = "[[limits.rules]]\nname = \"shared\"\nrate = \"50/m\"\nkey = [\"global\"]\nmethods = [\"tools/call\"]\n";
    let (rec1, rec2) = (dir.0.join("one.jsonl"), dir.0.join("two.jsonl"));
    let one = gantry()
        .section(&store(&redis, rules))
        .backend(python_fixture("mb", "misbehaving_server.py").record(&rec1))
        .start();
    let two = gantry()
        .section(&store(&redis, rules))
        .backend(python_fixture("mb", "misbehaving_server.py").record(&rec2))
        .start();
    let mut session = one.client();
    session.initialize().await;
    let stateless = Stateless::new(&two);
    let (mut admitted, mut limited) = (0, 0);
    let started = Instant::now();
    for i in 0..60 {
        let a = session
            .call_tool(json!(i), "echo", json!({"message": "one"}))
            .await;
        let b = stateless
            .call(json!(i), "echo", json!({"message": "two"}), json!({}))
            .await;
        let b = b.response(&json!(i)).unwrap().clone();
        for r in [a, b] {
            match answer(&r) {
                Answer::Admitted => admitted += 1,
                Answer::Limited(m) => {
                    assert!(m.contains("Rate limited by rule `shared`"), "{m}");
                    limited += 1;
                }
            }
        }
    }
    // The burst of 50, plus what the rate refills meanwhile (one per 1.2 s).
    let refilled = (started.elapsed().as_secs_f64() / 1.2).ceil() as usize;
    assert!(
        admitted >= 50 && admitted <= 50 + refilled,
        "admitted {admitted} of 120 (limited {limited}) under one budget of 50/m in {:?}",
        started.elapsed()
    );
    let (r1, r2) = (received(&rec1, None), received(&rec2, None));
    assert_eq!(r1 + r2, admitted, "the backends received {r1} + {r2}");
    assert!(
        r1 > 10 && r2 > 10,
        "both replicas admitted some: {r1}, {r2}"
    );
}

/// Redis killed: `open` admits, `closed` refuses (saying why), `local` falls back
/// to this process's own budget. Redis back (empty): limits apply again by
/// themselves.
#[tokio::test]
async fn with_redis_gone_each_rule_keeps_its_policy_and_limits_return_with_it() {
    let mut redis = Redis::start();
    let dir = Scratch::new("limits-redis-down");
    let record = dir.0.join("received.jsonl");
    let rules = "\
[[limits.rules]]\nname = \"open\"\nrate = \"1/h\"\ntools = [\"echo\"]\non_store_error = \"open\"\n\
[[limits.rules]]\nname = \"closed\"\nrate = \"1/h\"\ntools = [\"pid\"]\non_store_error = \"closed\"\n\
[[limits.rules]]\nname = \"local\"\nrate = \"1/h\"\nburst = 2\ntools = [\"env\"]\non_store_error = \"local\"\n";
    let g = gantry()
        .section(&store(&redis, rules))
        .backend(python_fixture("mb", "misbehaving_server.py").record(&record))
        .start();
    let mut c = g.client();
    c.initialize().await;
    let echo = |i: i64| c.call_tool(json!(i), "echo", json!({"message": "e"}));
    assert_eq!(answer(&echo(1).await), Answer::Admitted);

    redis.kill();
    // open: over its budget, yet admitted while Redis cannot say so.
    for i in 2..5 {
        assert_eq!(answer(&echo(i).await), Answer::Admitted, "call {i}");
    }
    // closed: refused, and told why.
    for i in 5..7 {
        let r = c.call_tool(json!(i), "pid", json!({})).await;
        match answer(&r) {
            Answer::Limited(m) => assert!(m.contains("cannot be checked now"), "{m}"),
            other => panic!("closed rule admitted a call without Redis: {other:?}"),
        }
    }
    // local: this process's own budget of burst 2.
    let env = |i: i64| c.call_tool(json!(i), "env", json!({"name": "HOME"}));
    assert_eq!(answer(&env(7).await), Answer::Admitted);
    assert_eq!(answer(&env(8).await), Answer::Admitted);
    match answer(&env(9).await) {
        Answer::Limited(m) => assert!(m.contains("Rate limited by rule `local`"), "{m}"),
        other => panic!("the local budget did not hold: {other:?}"),
    }
    assert_eq!(received(&record, Some("echo")), 4);
    assert_eq!(received(&record, Some("pid")), 0);
    assert_eq!(received(&record, Some("env")), 2);

    redis.restart();
    // Back without a Gantry restart: the closed rule admits once, then holds.
    let end = Instant::now() + Duration::from_secs(10);
    let mut id = 100;
    loop {
        id += 1;
        let r = c.call_tool(json!(id), "pid", json!({})).await;
        if answer(&r) == Answer::Admitted {
            break;
        }
        assert!(
            Instant::now() < end,
            "Redis is back but the rule still refuses: {r}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = c.call_tool(json!(200), "pid", json!({})).await;
    match answer(&r) {
        Answer::Limited(m) => assert!(m.contains("Rate limited by rule `closed`"), "{m}"),
        other => panic!("the shared budget does not hold after Redis returned: {other:?}"),
    }
    assert_eq!(answer(&echo(201).await), Answer::Admitted);
    assert!(matches!(answer(&echo(202).await), Answer::Limited(_)));
    assert_eq!(received(&record, Some("pid")), 1);
    assert_eq!(received(&record, Some("echo")), 5);
}

/// Once Redis refused a key, later requests within its wait are refused here
/// without a round trip: Redis ran the script twice for 30 calls.
#[tokio::test]
async fn requests_certainly_over_are_refused_without_asking_redis() {
    let redis = Redis::start();
    let rules = "[[limits.rules]]\nname = \"r\"\nrate = \"1/h\"\nmethods = [\"tools/call\"]\n";
    let (_g, c) = example_behind(&redis, rules).await;
    let mut admitted = 0;
    for i in 0..30 {
        let r = c.call_tool(json!(i), "echo", json!({"message": "x"})).await;
        if answer(&r) == Answer::Admitted {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 1);
    let scripts = redis.calls("evalsha") + redis.calls("eval");
    assert!(
        (2..=3).contains(&scripts),
        "Redis ran the limit script {scripts} times for 30 calls"
    );
}

/// A Redis that stops answering (SIGSTOP) costs a request at most the store's
/// timeout: the policy decides, and once Redis answers again the budget holds.
#[tokio::test]
async fn a_redis_that_hangs_costs_at_most_its_timeout() {
    let redis = Redis::start();
    let rules = "[[limits.rules]]\nname = \"r\"\nrate = \"2/h\"\nmethods = [\"tools/call\"]\n";
    let (_g, c) = example_behind(&redis, rules).await;
    assert_eq!(
        answer(&c.call_tool(json!(1), "echo", json!({"message": "x"})).await),
        Answer::Admitted
    );
    redis.pause();
    for i in 2..5 {
        let call = c.call_tool(json!(i), "echo", json!({"message": "x"}));
        let r = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .unwrap_or_else(|_| panic!("call {i} waited for a Redis that does not answer"));
        assert_eq!(answer(&r), Answer::Admitted, "open while Redis hangs");
    }
    redis.resume();
    // One left of the 2 in Redis, then refused.
    let end = Instant::now() + Duration::from_secs(10);
    let mut id = 10;
    loop {
        id += 1;
        let r = c
            .call_tool(json!(id), "echo", json!({"message": "x"}))
            .await;
        if let Answer::Limited(m) = answer(&r) {
            assert!(m.contains("Rate limited by rule `r`"), "{m}");
            break;
        }
        assert!(
            Instant::now() < end,
            "Redis answers again but the limit does not hold"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
