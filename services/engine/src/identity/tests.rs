//! Golden vectors of spec §3.5 / §10 and the golden v6 run (`tests/fixtures/babysitter-v6`, vendored from the reference),
//! all produced by the reference. Fixtures are compiled in, so these tests do no IO.

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::*;

macro_rules! golden_run_file {
    ($rel:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/babysitter-v6/runs/01JGOLDENRUN0000000000000/",
            $rel
        ))
    };
}

/// The golden run's `EFFECT_REQUESTED` journal files.
const REQUESTED_EVENTS: [&str; 4] = [
    golden_run_file!("journal/000002.01JGFJK0YG000000000000001C.json"),
    golden_run_file!("journal/000004.01JGFJK3W8000000000000001F.json"),
    golden_run_file!("journal/000005.01JGFJK5TR000000000000001H.json"),
    golden_run_file!("journal/000008.01JGFJK9QR000000000000001N.json"),
];

/// The golden run's `task.json` files, with the call's label (`None` = no label option).
const TASK_FILES: [(&str, Option<&str>); 4] = [
    (
        golden_run_file!("tasks/01JGFJJZZ8000000000000001B/task.json"),
        None,
    ),
    (
        golden_run_file!("tasks/01JGFJK2X0000000000000001E/task.json"),
        Some("check-1"),
    ),
    (
        golden_run_file!("tasks/01JGFJK4VG000000000000001G/task.json"),
        Some("check-2"),
    ),
    (
        golden_run_file!("tasks/01JGFJK8RG000000000000001M/task.json"),
        Some("Ship gate"),
    ),
];

const GOLDEN_PROCESS_ID: &str = "golden/demo";

fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

/// Keys of every object, depth first, so key *order* can be compared (map equality ignores it).
fn key_paths(v: &Value) -> Vec<String> {
    fn walk(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (key, child) in map {
                    let path = format!("{prefix}/{key}");
                    out.push(path.clone());
                    walk(child, &path, out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{prefix}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// Equal values with equal key order everywhere.
fn assert_same_document(actual: &Value, expected: &Value) {
    assert_eq!(actual, expected);
    assert_eq!(key_paths(actual), key_paths(expected));
}

/// Step id of the first call (occurrence 0) for a task id, label and JSON args.
fn derived_step_id(task_id: &str, label: Option<&str>, args: Option<&Value>) -> String {
    step_id(
        &step_base(task_id, label, &shape_hash(&shape_json(args))),
        0,
    )
}

#[test]
fn identity_locale_compare_matches_icu_root_example() {
    let expected = [
        "_x", "-y", "1", "a", "A", "ab", "aB", "Ab", "b", "e", "é", "f", "Z",
    ];
    let mut shuffled = expected;
    shuffled.reverse();
    shuffled.swap(0, 6);
    shuffled.swap(3, 11);
    shuffled.sort_by(|a, b| locale_compare(a, b));
    assert_eq!(shuffled, expected);

    let mut bytes = expected;
    bytes.sort_unstable();
    assert_eq!(
        bytes,
        [
            "-y", "1", "A", "Ab", "Z", "_x", "a", "aB", "ab", "b", "e", "f", "é"
        ]
    );
}

#[test]
fn identity_locale_compare_properties() {
    assert_eq!(locale_compare("a", "A"), Ordering::Less);
    assert_eq!(locale_compare("A", "b"), Ordering::Less);
    assert_eq!(locale_compare("-", "0"), Ordering::Less);
    assert_eq!(locale_compare("9", "a"), Ordering::Less);
    assert_eq!(locale_compare("Zeta", "alpha"), Ordering::Greater);
    assert_eq!(locale_compare("same", "same"), Ordering::Equal);
    // Canonically equivalent forms are equal, as in ICU4C.
    assert_eq!(locale_compare("\u{e9}", "e\u{301}"), Ordering::Equal);
    // Not numeric collation: "10" < "2".
    assert_eq!(locale_compare("10", "2"), Ordering::Less);
}

#[test]
fn identity_array_index_keys() {
    for key in ["0", "1", "2", "10", "4294967294"] {
        assert!(is_array_index(key), "{key}");
    }
    for key in [
        "",
        "01",
        "00",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "4294967295",
        "4294967296",
        "99999999999",
        "١",
    ] {
        assert!(!is_array_index(key), "{key}");
    }
}

#[test]
fn identity_js_sorted_keys_puts_array_indices_first() {
    assert_eq!(js_sorted_keys(["b", "10", "2", "a"]), ["2", "10", "a", "b"]);
    assert_eq!(
        js_sorted_keys(["Zeta", "01", "feature", "4294967295", "0", "alpha"]),
        ["0", "01", "4294967295", "alpha", "feature", "Zeta"]
    );
    // Ties of the collation keep input order (JS sort is stable).
    assert_eq!(
        js_sorted_keys(["e\u{301}", "\u{e9}"]),
        ["e\u{301}", "\u{e9}"]
    );
    assert_eq!(
        js_sorted_keys(["\u{e9}", "e\u{301}"]),
        ["\u{e9}", "e\u{301}"]
    );
    assert!(js_sorted_keys([]).is_empty());
}

#[test]
fn identity_shape_hash_golden_vectors() {
    for (shape, hash) in [
        (r#"{"value":"number"}"#, "079a626c6aa0"),
        (
            r#"{"iso":"string","targetEpochMs":"number"}"#,
            "04008deeff20",
        ),
        (r#"{"n":"number"}"#, "ba11ac12390a"),
        ("{}", "44136fa355b3"),
        (
            r#"{"alpha":"string","feature":"string","Zeta":"number"}"#,
            "efd47d40d144",
        ),
        (r#""undefined""#, "cf939b398b75"),
    ] {
        assert_eq!(shape_hash(shape), hash, "{shape}");
    }
    // Byte-order key sorting would have given a different hash.
    assert_eq!(
        shape_hash(r#"{"Zeta":"number","alpha":"string","feature":"string"}"#),
        "2a8b528c7870"
    );
}

#[test]
fn identity_shape_of_sorts_keys_like_js() {
    let args = json!({"feature": "demo", "Zeta": 1, "alpha": "x"});
    assert_eq!(
        shape_json(Some(&args)),
        r#"{"alpha":"string","feature":"string","Zeta":"number"}"#
    );
    assert_eq!(shape_hash(&shape_json(Some(&args))), "efd47d40d144");

    assert_eq!(shape_json(None), r#""undefined""#);
    assert_eq!(shape_json(Some(&Value::Null)), r#""null""#);
    assert_eq!(shape_json(Some(&json!({}))), "{}");
    assert_eq!(shape_json(Some(&json!([]))), "[]");
    let nested = json!({
        "b": [1, "s", true, null, {"y": 1, "X": [false]}],
        "10": {"k": null},
        "2": 2.5,
        "a": {}
    });
    assert_eq!(
        shape_json(Some(&nested)),
        r#"{"2":"number","10":{"k":"null"},"a":{},"b":["number","string","boolean","null",{"X":["boolean"],"y":"number"}]}"#
    );
}

#[test]
fn identity_shape_of_drops_proto_keys_like_js() {
    let args = json!({"__proto__": {"x": 1}, "a": 1, "nested": {"__proto__": "s"}});
    assert_eq!(shape_json(Some(&args)), r#"{"a":"number","nested":{}}"#);
}

#[test]
fn identity_step_id_table() {
    assert_eq!(
        derived_step_id(
            "golden.plan",
            None,
            Some(&json!({"feature": "demo", "Zeta": 1, "alpha": "x"}))
        ),
        "golden-plan.default.efd47d40d144.0"
    );
    assert_eq!(
        derived_step_id("golden.shell", Some("check-1"), Some(&json!({"n": 1}))),
        "golden-shell.check-1.ba11ac12390a.0"
    );
    let work = step_base(
        "demo.work",
        None,
        &shape_hash(&shape_json(Some(&json!({"step": 2})))),
    );
    assert_eq!(step_id(&work, 1), "demo-work.default.085592c01d25.1");
    assert_eq!(
        derived_step_id("demo.check", None, Some(&json!({}))),
        "demo-check.default.44136fa355b3.0"
    );
    assert_eq!(
        derived_step_id("alpha-task", None, Some(&json!({"value": 5}))),
        "alpha-task.default.079a626c6aa0.0"
    );
    assert_eq!(
        derived_step_id(
            SLEEP_TASK_ID,
            Some("sleep-thunk"),
            Some(&json!({"targetEpochMs": 1, "iso": "2025-01-01T00:00:00.000Z"}))
        ),
        "__sdk-sleep.sleep-thunk.04008deeff20.0"
    );
    assert_eq!(
        derived_step_id("any", Some("any"), None),
        "any.any.cf939b398b75.0"
    );
    // An empty label normalises to "default", like an absent one.
    assert_eq!(
        derived_step_id("demo.check", Some(""), Some(&json!({}))),
        "demo-check.default.44136fa355b3.0"
    );
}

#[test]
fn identity_normalize_segment() {
    for (input, expected) in [
        ("golden.plan", "golden-plan"),
        ("__sdk.sleep", "__sdk-sleep"),
        ("check-1", "check-1"),
        (
            "sleep:2025-01-01T00:00:00.000Z",
            "sleep-2025-01-01T00-00-00-000Z",
        ),
        ("  a  b  ", "a-b"),
        ("a..//b", "a-b"),
        (".a.", "-a-"),
        ("é", "-"),
        ("x😀y", "x-y"),
        ("", "default"),
        ("   ", "default"),
        ("\u{feff}x\u{a0}", "x"),
        // JS trim does not remove NEL, so it becomes a dash.
        ("\u{85}x", "-x"),
    ] {
        assert_eq!(normalize_segment(input), expected, "{input:?}");
    }
}

#[test]
fn identity_invocation_keys_and_hashes() {
    let key = invocation_key(
        GOLDEN_PROCESS_ID,
        "golden-plan.default.efd47d40d144.0",
        "golden.plan",
    );
    assert_eq!(
        key,
        "golden/demo:golden-plan.default.efd47d40d144.0:golden.plan"
    );
    assert_eq!(
        invocation_hash(&key),
        "0e485a4c023ae299f5fa497b05a3f103fa07252686fbc146f8ca5a60dcc7fa1e"
    );

    assert_eq!(legacy_step_id(1), "S000001");
    assert_eq!(legacy_step_id(42), "S000042");
    assert_eq!(legacy_step_id(1_234_567), "S1234567");
    let legacy = legacy_invocation_key("bench/seq", 1, "trivial-step");
    assert_eq!(legacy, "bench/seq:S000001:trivial-step");
    assert_eq!(
        invocation_hash(&legacy),
        "95afea202f6e25c26fcac2115ed9b1c231edaa6b48d41f0c51c6cf3f3a3de575"
    );
}

#[test]
fn identity_parallel_group_id() {
    assert_eq!(
        parallel_group_id(&[
            "golden/demo:golden-shell.check-1.ba11ac12390a.0:golden.shell",
            "golden/demo:golden-shell.check-2.ba11ac12390a.0:golden.shell",
        ]),
        "b532fac65507198b"
    );
}

#[test]
fn identity_breakpoint_slug_and_step_ids() {
    for (label, slug) in [
        ("Ship gate", "ship-gate"),
        ("ship-gate", "ship-gate"),
        ("  --Hello,  World!!--  ", "hello-world"),
        ("v1.2 Release", "v1.2-release"),
        ("Ärger über X", "rger-ber-x"),
        ("breakpoint", "breakpoint"),
        ("", "breakpoint"),
        ("!!!", "breakpoint"),
        ("a_b", "a-b"),
    ] {
        assert_eq!(breakpoint_slug(label), slug, "{label:?}");
    }
    assert_eq!(breakpoint_base("ship-gate"), "__sdk.breakpoint.ship-gate");
    assert_eq!(
        breakpoint_step_id("ship-gate", 0),
        "__sdk.breakpoint.ship-gate"
    );
    assert_eq!(
        breakpoint_step_id("ship-gate", 1),
        "__sdk.breakpoint.ship-gate.1"
    );
    assert_eq!(
        breakpoint_step_id("ship-gate", 2),
        "__sdk.breakpoint.ship-gate.2"
    );
}

#[test]
fn identity_key_sorted_clone_sorts_every_object() {
    let value = json!({
        "b": [{"z": 1, "A": 2, "a": 3}, [{"2": 0, "10": 1}]],
        "10": null,
        "a": {"é": 1, "f": 2, "e": 3},
        "2": "x"
    });
    let clone = key_sorted_clone(&value);
    assert_eq!(clone, value);
    assert_eq!(
        clone.to_string(),
        r#"{"2":"x","10":null,"a":{"e":3,"é":1,"f":2},"b":[{"a":3,"A":2,"z":1},[{"2":0,"10":1}]]}"#
    );
    assert_eq!(key_sorted_clone(&json!(7)), json!(7));
    // Unlike the reference (which loses it), a "__proto__" key is kept.
    assert_eq!(
        key_sorted_clone(&json!({"__proto__": 1})).to_string(),
        r#"{"__proto__":1}"#
    );
}

#[test]
fn identity_key_sorted_clone_of_breakpoint_task_json() {
    // Spec §4.4: the TaskDef part (keys before schemaVersion) is the key-sorted clone.
    let taskdef = json!({
        "title": "Ship gate",
        "metadata": {
            "requestedAt": "2025-01-01T00:00:19.000Z",
            "payload": {"question": "Ship it?", "options": ["Approve", "Reject"]},
            "label": "Ship gate",
            "breakpointId": "ship-gate"
        },
        "kind": "breakpoint",
        "autoApproval": {"recommended": false, "reason": "No matching auto-approval rule", "consecutiveApprovals": 0}
    });
    let expected = r#"{"autoApproval":{"consecutiveApprovals":0,"reason":"No matching auto-approval rule","recommended":false},"kind":"breakpoint","metadata":{"breakpointId":"ship-gate","label":"Ship gate","payload":{"options":["Approve","Reject"],"question":"Ship it?"},"requestedAt":"2025-01-01T00:00:19.000Z"},"title":"Ship gate"}"#;
    assert_eq!(key_sorted_clone(&taskdef).to_string(), expected);
}

/// The fields `task.json` appends after the TaskDef's sorted keys.
const APPENDED_FIELDS: [&str; 7] = [
    "schemaVersion",
    "effectId",
    "taskId",
    "invocationKey",
    "stepId",
    "inputs",
    "sdkVersion",
];

#[test]
fn identity_golden_task_files_are_key_sorted_clones() {
    for (text, _) in TASK_FILES {
        let task = parse(text);
        let map = task.as_object().unwrap();
        // The TaskDef part is already in key-sorted-clone order…
        let taskdef: serde_json::Map<String, Value> = map
            .iter()
            .filter(|(key, _)| !APPENDED_FIELDS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let taskdef = Value::Object(taskdef);
        assert_same_document(&key_sorted_clone(&taskdef), &taskdef);
        // …and comes first, followed by the appended fields in assignment order.
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        let split = keys.len() - APPENDED_FIELDS.len();
        assert_eq!(keys[split..], APPENDED_FIELDS);
        let inputs = &map["inputs"];
        assert_same_document(&key_sorted_clone(inputs), inputs);
    }
}

#[test]
fn identity_golden_task_files_rebuilt_by_task_json() {
    for (text, _) in TASK_FILES {
        let expected = parse(text);
        let map = expected.as_object().unwrap();
        // The TaskDef as a process would build it: the non-appended keys in reverse order.
        let mut taskdef = serde_json::Map::new();
        for (key, value) in map.iter().rev() {
            if !APPENDED_FIELDS.contains(&key.as_str()) {
                taskdef.insert(key.clone(), reverse_keys(value));
            }
        }
        let str_field = |key: &str| map[key].as_str().unwrap();
        let ids = TaskJsonIds {
            effect_id: str_field("effectId"),
            task_id: str_field("taskId"),
            invocation_key: str_field("invocationKey"),
            step_id: str_field("stepId"),
        };
        let args = reverse_keys(&map["inputs"]);
        let actual = task_json(
            Value::Object(taskdef),
            &ids,
            TaskInputs::Inline(args),
            Some("6.0.0"),
        )
        .unwrap();
        assert_same_document(&actual, &expected);
    }
}

/// Deep copy with every object's keys in reverse order.
fn reverse_keys(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reverse_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(reverse_keys).collect()),
        scalar => scalar.clone(),
    }
}

#[test]
fn identity_task_json_normalised_fields() {
    let ids = TaskJsonIds {
        effect_id: "E",
        task_id: "t",
        invocation_key: "p:s:t",
        step_id: "s",
    };
    let taskdef = json!({
        "title": 5,
        "sleep": [1],
        "outputSchema": false,
        "labels": [" b ", "a", "B", 3, "", "a", "é"],
        "kind": "node",
        "inputs": "stale",
        "io": {"b": 1, "a": 2},
        "metadata": null,
        "zzz": true,
        "sdkVersion": "old"
    });
    let doc = task_json(
        taskdef,
        &ids,
        TaskInputs::Spilled("tasks/E/blobs/inputs-x.json"),
        None,
    )
    .unwrap();
    assert_eq!(
        doc.to_string(),
        concat!(
            r#"{"io":{"a":2,"b":1},"kind":"node","labels":["a","b","B","é"],"outputSchema":false,"#,
            r#""sdkVersion":"old","zzz":true,"schemaVersion":"2026.01.tasks-v1","effectId":"E","#,
            r#""taskId":"t","invocationKey":"p:s:t","stepId":"s","inputsRef":"tasks/E/blobs/inputs-x.json"}"#
        )
    );

    let undefined_args = task_json(
        json!({"kind": "x", "inputs": 1}),
        &ids,
        TaskInputs::Undefined,
        Some("6.0.0"),
    )
    .unwrap();
    assert_eq!(
        undefined_args.to_string(),
        r#"{"inputs":1,"kind":"x","schemaVersion":"2026.01.tasks-v1","effectId":"E","taskId":"t","invocationKey":"p:s:t","stepId":"s","sdkVersion":"6.0.0"}"#
    );

    let null_args = task_json(
        json!({"kind": "x"}),
        &ids,
        TaskInputs::Inline(Value::Null),
        None,
    )
    .unwrap();
    assert_eq!(null_args["inputs"], Value::Null);

    assert_eq!(
        task_json(json!([]), &ids, TaskInputs::Undefined, None),
        Err(TaskJsonError::NotAnObject)
    );
    assert_eq!(
        task_json(json!({"kind": ""}), &ids, TaskInputs::Undefined, None),
        Err(TaskJsonError::MissingKind)
    );
}

#[test]
fn identity_golden_journal_effects() {
    let tasks: Vec<(Value, Option<&str>)> = TASK_FILES
        .iter()
        .map(|(text, label)| (parse(text), *label))
        .collect();
    let mut shell_keys = Vec::new();
    for text in REQUESTED_EVENTS {
        let event = parse(text);
        let data = &event["data"];
        let field = |key: &str| data[key].as_str().unwrap();
        let (task_id, step, key) = (field("taskId"), field("stepId"), field("invocationKey"));
        assert_eq!(invocation_key(GOLDEN_PROCESS_ID, step, task_id), key);
        assert_eq!(invocation_hash(key), field("invocationHash"));

        let (task, label) = tasks
            .iter()
            .find(|(task, _)| task["effectId"] == data["effectId"])
            .expect("every requested effect has a task.json");
        assert_eq!(task["stepId"], data["stepId"]);
        if task_id == BREAKPOINT_TASK_ID {
            let slug = breakpoint_slug(label.unwrap());
            assert_eq!(task["metadata"]["breakpointId"], slug.as_str());
            assert_eq!(breakpoint_step_id(&slug, 0), step);
        } else {
            assert_eq!(
                derived_step_id(task_id, *label, Some(&task["inputs"])),
                step
            );
        }
        if task_id == "golden.shell" {
            shell_keys.push(key.to_owned());
        }
    }
    let shell_keys: Vec<&str> = shell_keys.iter().map(String::as_str).collect();
    assert_eq!(parallel_group_id(&shell_keys), "b532fac65507198b");
}

/// 400 keys (ASCII identifiers, punctuation, digits, case and accent variants, ligatures,
/// fullwidth forms, Greek, Cyrillic, Hebrew, Arabic, Thai, Hangul, kana, emoji, ignorable
/// characters) with their order under `localeCompare` and as keys of a JS object, recorded with
/// Node 20.20.2 (ICU 78.2). Han and code points unassigned in Unicode 17 are left out: see
/// [`locale_compare`].
#[test]
fn identity_node_collation_vector() {
    let node = parse(include_str!("node_collation_order.json"));
    let strings = |key: &str| -> Vec<&str> {
        node[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect()
    };
    let input = strings("input");

    let mut sorted = input.clone();
    sorted.sort_by(|a, b| locale_compare(a, b));
    assert_eq!(sorted, strings("sorted"));

    let expected_keys = strings("objectKeyOrder");
    assert_eq!(js_sorted_keys(input.iter().copied()), expected_keys);
    let object: serde_json::Map<String, Value> = input
        .iter()
        .map(|key| (key.to_string(), json!(0)))
        .collect();
    let shape = shape_of(Some(&Value::Object(object)));
    let shape_keys: Vec<&str> = shape
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(shape_keys, expected_keys);
}

/// The ASCII letters-and-digits shortcut of [`locale_compare`] agrees with the collator on every
/// pair of a few thousand such strings (case pairs, digit runs, prefixes included).
#[test]
fn identity_ascii_alphanumeric_shortcut_matches_the_collator() {
    const ALPHABET: &[u8] = b"aAbByYzZ0129";
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut strings: Vec<String> = vec![String::new()];
    for _ in 0..600 {
        let len = (next() % 5) as usize;
        strings.push(
            (0..len)
                .map(|_| char::from(ALPHABET[(next() % ALPHABET.len() as u64) as usize]))
                .collect(),
        );
    }
    let mut checked = 0;
    for a in &strings {
        for b in &strings {
            assert_eq!(
                super::ascii_alphanumeric_compare(a, b),
                Some(super::COLLATOR.compare(a, b)),
                "{a:?} vs {b:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 300_000);
    assert_eq!(super::ascii_alphanumeric_compare("a-b", "ab"), None);
}
