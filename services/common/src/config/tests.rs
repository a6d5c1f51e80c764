use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct TestConfig {
    version: u32,
    server: TestServer,
    store: TestStore,
    tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct TestServer {
    listen_addr: String,
    max_message_size: u32,
    compress: bool,
    #[serde(with = "duration")]
    request_timeout: Duration,
    #[serde(with = "duration::option")]
    idle_timeout: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct TestStore {
    url: String,
    region: Option<String>,
}

impl Default for TestConfig {
    fn default() -> Self {
        Self {
            version: 1,
            server: TestServer::default(),
            store: TestStore::default(),
            tags: vec!["a".into()],
        }
    }
}

impl Default for TestServer {
    fn default() -> Self {
        Self {
            listen_addr: "127.0.0.1:0".into(),
            max_message_size: 4096,
            compress: false,
            request_timeout: Duration::from_secs(30),
            idle_timeout: None,
        }
    }
}

const PREFIX: &str = "BABYSITTER_TEST";

fn loader() -> ConfigLoader {
    ConfigLoader::new(PREFIX)
}

fn write_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn env(pairs: &[(&str, &str)]) -> EnvMap {
    pairs.iter().copied().collect()
}

#[test]
fn defaults_alone_give_default() {
    let cfg: TestConfig = loader().load().unwrap();
    assert_eq!(cfg, TestConfig::default());
}

#[test]
fn file_overrides_defaults_key_by_key() {
    let f = write_file(
        r#"
        tags = ["x", "y"]
        [server]
        listen-addr = "127.0.0.1:7000"
        request-timeout = "1m 30s"
        idle-timeout = "5s"
        "#,
    );
    let cfg: TestConfig = loader().file(Some(f.path())).load().unwrap();
    assert_eq!(cfg.server.listen_addr, "127.0.0.1:7000");
    assert_eq!(cfg.server.request_timeout, Duration::from_secs(90));
    assert_eq!(cfg.server.idle_timeout, Some(Duration::from_secs(5)));
    assert_eq!(
        cfg.server.max_message_size, 4096,
        "untouched keys keep their default"
    );
    assert_eq!(cfg.tags, ["x", "y"]);
}

#[test]
fn env_is_typed_and_strings_stay_strings() {
    let e = env(&[
        ("BABYSITTER_TEST__SERVER__MAX_MESSAGE_SIZE", "1024"),
        ("BABYSITTER_TEST__SERVER__COMPRESS", "true"),
        // A string key given something that reads as a bool stays a string.
        ("BABYSITTER_TEST__STORE__URL", "true"),
        ("BABYSITTER_TEST__STORE__REGION", "eu-west-1"),
        ("BABYSITTER_TEST__TAGS", r#"["p", "q"]"#),
        // Not config keys: the config-file variable, another prefix, another service.
        ("BABYSITTER_TEST_CONFIG", "/nowhere.toml"),
        ("BABYSITTER_TESTING__SERVER__NOPE", "1"),
        ("OTHER__SERVER__NOPE", "1"),
    ]);
    let cfg: TestConfig = loader().env(e).load().unwrap();
    assert_eq!(cfg.server.max_message_size, 1024);
    assert!(cfg.server.compress);
    assert_eq!(cfg.store.url, "true");
    assert_eq!(cfg.store.region.as_deref(), Some("eu-west-1"));
    assert_eq!(cfg.tags, ["p", "q"]);
}

#[test]
fn precedence_is_defaults_file_env_overrides_json() {
    let f = write_file(
        "[store]\nurl = \"file:///from-file\"\nregion = \"file\"\n[server]\ncompress = true\n",
    );
    let e = env(&[
        ("BABYSITTER_TEST__STORE__URL", "s3://from-env"),
        ("BABYSITTER_TEST__STORE__REGION", "env"),
        ("BABYSITTER_TEST__VERSION", "2"),
    ]);
    let cfg: TestConfig = loader()
        .file(Some(f.path()))
        .env(e)
        .overrides(["store.url=s3://from-flag", "server.max-message-size = 77"])
        .json_override(serde_json::json!({"store": {"region": "json", "url": null}}))
        .load()
        .unwrap();
    assert!(cfg.server.compress, "file beats defaults");
    assert_eq!(cfg.version, 2, "env beats defaults");
    assert_eq!(
        cfg.store.url, "s3://from-flag",
        "override beats env; json null leaves it"
    );
    assert_eq!(cfg.server.max_message_size, 77);
    assert_eq!(
        cfg.store.region.as_deref(),
        Some("json"),
        "json beats everything"
    );
}

#[test]
fn unknown_env_key_names_the_variable() {
    let e = env(&[("BABYSITTER_TEST__SERVER__LISTEN_ADR", "127.0.0.1:1")]);
    let err = loader().env(e).load::<TestConfig>().unwrap_err();
    match &err {
        ConfigError::InvalidEnv { var, key, message } => {
            assert_eq!(var, "BABYSITTER_TEST__SERVER__LISTEN_ADR");
            assert_eq!(key, "server.listen-adr");
            assert!(message.contains("unknown field `listen-adr`"), "{message}");
        }
        other => panic!("wrong error {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("environment variable BABYSITTER_TEST__SERVER__LISTEN_ADR"),
        "{err}"
    );
}

#[test]
fn bad_env_value_and_names_are_reported() {
    let e = env(&[("BABYSITTER_TEST__SERVER__MAX_MESSAGE_SIZE", "lots")]);
    let err = loader().env(e).load::<TestConfig>().unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidEnv { key, .. } if key == "server.max-message-size"),
        "{err:?}"
    );
    let e = env(&[("BABYSITTER_TEST__SERVER__MAX_MESSAGE_SIZE", "99999999999")]);
    let err = loader().env(e).load::<TestConfig>().unwrap_err();
    assert!(
        err.to_string().contains("u32"),
        "the typed error is the one reported: {err}"
    );
    let e = env(&[("BABYSITTER_TEST__SERVER____X", "1")]);
    let err = loader().env(e).load::<TestConfig>().unwrap_err();
    assert!(err.to_string().contains("empty key segment"), "{err}");
    let e = env(&[("BABYSITTER_TEST__VERSION__X", "1")]);
    let err = loader().env(e).load::<TestConfig>().unwrap_err();
    assert!(
        err.to_string()
            .contains("`version` is a integer, not a table"),
        "{err}"
    );
}

#[test]
fn file_errors_name_the_file_and_key() {
    let f = write_file("[server]\nlisten-adr = \"x\"\n");
    let err = loader()
        .file(Some(f.path()))
        .load::<TestConfig>()
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ConfigError::InvalidFile { .. }), "{err:?}");
    assert!(text.contains(&f.path().display().to_string()), "{text}");
    assert!(text.contains("unknown field `listen-adr`"), "{text}");
    assert!(text.contains("`server`"), "{text}");

    let f = write_file("[server]\nmax-message-size = \"big\"\n");
    let err = loader()
        .file(Some(f.path()))
        .load::<TestConfig>()
        .unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidFile { key, .. } if key == "server.max-message-size"),
        "{err:?}"
    );

    let f = write_file("[server\n");
    let err = loader()
        .file(Some(f.path()))
        .load::<TestConfig>()
        .unwrap_err();
    assert!(matches!(err, ConfigError::ParseFile { .. }), "{err:?}");
    assert!(err.to_string().contains("line 1"), "{err}");

    let missing = f.path().with_extension("missing");
    let err = loader()
        .file(Some(&missing))
        .load::<TestConfig>()
        .unwrap_err();
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}

#[test]
fn override_errors_never_echo_the_value() {
    let err = loader()
        .overrides(["store.url"])
        .load::<TestConfig>()
        .unwrap_err();
    assert!(matches!(err, ConfigError::BadOverride { .. }), "{err:?}");
    let err = loader()
        .overrides([".url=secret-value"])
        .load::<TestConfig>()
        .unwrap_err();
    assert!(!err.to_string().contains("secret-value"), "{err}");
    let err = loader()
        .overrides(["store.token=secret-value"])
        .load::<TestConfig>()
        .unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidOverride { key, .. } if key == "store.token"),
        "{err:?}"
    );
    assert!(!err.to_string().contains("secret-value"), "{err}");
    let err = loader()
        .json_override(serde_json::json!({"server": {"bogus": 1}}))
        .load::<TestConfig>()
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidJson { .. }), "{err:?}");
    let err = loader()
        .json_override(serde_json::json!([1]))
        .load::<TestConfig>()
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidJson { .. }), "{err:?}");
}

#[test]
fn dump_round_trips_through_the_loader() {
    let mut cfg = TestConfig::default();
    cfg.store.url = "s3://bucket/prefix".into();
    cfg.server.idle_timeout = Some(Duration::from_millis(1500));
    let text = dump_config(&cfg, "BABYSITTER_TEST").unwrap();
    assert!(text.contains("[server]"), "{text}");
    assert!(text.contains("request-timeout = \"30s\""), "{text}");
    assert!(text.contains("idle-timeout = \"1s 500ms\""), "{text}");
    let f = write_file(&text);
    let back: TestConfig = loader().file(Some(f.path())).load().unwrap();
    assert_eq!(back, cfg);
    let none = dump_config(&TestConfig::default(), "BABYSITTER_TEST").unwrap();
    assert!(none.contains("idle-timeout = \"off\""), "{none}");
}

#[test]
fn dump_lists_unset_settings_with_their_variables() {
    #[derive(serde::Serialize)]
    struct Inner {
        #[serde(rename = "token-file")]
        token_file: Option<String>,
        set: Option<u32>,
    }
    #[derive(serde::Serialize)]
    struct Outer {
        journal: Inner,
        endpoint: Option<String>,
        list: Vec<u32>,
    }
    let cfg = Outer {
        journal: Inner {
            token_file: None,
            set: Some(3),
        },
        endpoint: None,
        list: vec![1],
    };
    let text = dump_config(&cfg, "BABYSITTER_X").unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("#   ")).collect();
    assert_eq!(
        lines,
        [
            "#   journal.token-file  BABYSITTER_X__JOURNAL__TOKEN_FILE",
            "#   endpoint            BABYSITTER_X__ENDPOINT",
        ],
        "{text}"
    );
    assert!(text.contains("set = 3"), "{text}");
    // Nothing unset: no such section.
    let full = dump_config(&serde_json::json!({"a": 1}), "BABYSITTER_X").unwrap();
    assert!(!full.contains("Unset"), "{full}");
}

#[test]
fn env_var_names_mirror_keys() {
    assert_eq!(
        env_var_name("BABYSITTER_JOURNAL", "store.url"),
        "BABYSITTER_JOURNAL__STORE__URL"
    );
    assert_eq!(
        env_var_name("BABYSITTER_JOURNAL", "server.listen-addr"),
        "BABYSITTER_JOURNAL__SERVER__LISTEN_ADDR"
    );
}

#[test]
fn raw_values_parse_as_toml_or_fall_back_to_strings() {
    assert_eq!(parse_value("8080"), Value::Integer(8080));
    assert_eq!(parse_value("false"), Value::Boolean(false));
    assert_eq!(parse_value("1.5"), Value::Float(1.5));
    assert_eq!(parse_value("\"quoted\""), Value::String("quoted".into()));
    assert_eq!(
        parse_value("s3://bucket/x"),
        Value::String("s3://bucket/x".into())
    );
    assert_eq!(
        parse_value("127.0.0.1:80"),
        Value::String("127.0.0.1:80".into())
    );
    assert_eq!(parse_value("1\nx = 2"), Value::String("1\nx = 2".into()));
    assert_eq!(parse_value(""), Value::String(String::new()));
}
