use super::*;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn a_claude_session_moves_to_another_home_and_project() {
    let a = tempfile::tempdir().unwrap();
    let home = a.path().join("home");
    let project = a.path().join("w-1/project");
    std::fs::create_dir_all(&project).unwrap();
    let dir = home
        .join(".claude/projects")
        .join(project_name(HarnessKind::ClaudeCode, &project));
    write(&dir.join("s1.jsonl"), "{\"a\":1}\n");
    write(&dir.join("s1/subagents/x.jsonl"), "{}\n");
    write(&home.join(".claude.json"), "{}");
    let before = signature(HarnessKind::ClaudeCode, &home).unwrap();
    let files = capture(HarnessKind::ClaudeCode, &home, "s1", None)
        .await
        .unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".claude/projects/{project}/s1.jsonl",
            ".claude/projects/{project}/s1/subagents/x.jsonl"
        ]
    );

    let b = tempfile::tempdir().unwrap();
    let (home2, project2) = (b.path().join("h"), b.path().join("elsewhere/p"));
    std::fs::create_dir_all(&project2).unwrap();
    restore(HarnessKind::ClaudeCode, &home2, &project2, &files)
        .await
        .unwrap();
    let moved = home2
        .join(".claude/projects")
        .join(project_name(HarnessKind::ClaudeCode, &project2));
    assert_eq!(
        std::fs::read_to_string(moved.join("s1.jsonl")).unwrap(),
        "{\"a\":1}\n"
    );
    assert_eq!(
        capture(HarnessKind::ClaudeCode, &home2, "s1", None)
            .await
            .unwrap(),
        files
    );

    write(&dir.join("s1.jsonl"), "{\"a\":1}\n{\"b\":2}\n");
    assert_ne!(signature(HarnessKind::ClaudeCode, &home).unwrap(), before);
}

#[test]
fn claude_names_a_project_directory_by_its_path() {
    assert_eq!(claude_project("/tmp/w_1/my.project"), "-tmp-w-1-my-project");
    let long = format!("/{}", "a".repeat(250));
    let name = claude_project(&long);
    assert!(name.starts_with(&format!("-{}", "a".repeat(199))), "{name}");
    assert_eq!(name.chars().nth(200), Some('-'));
    assert!(name.len() > 201 && name.len() <= 210, "{name}");
}

#[tokio::test]
async fn gemini_keeps_the_transcript_not_the_stub_and_writes_it_under_the_project_hash() {
    let a = tempfile::tempdir().unwrap();
    let home = a.path().join("home");
    let chats = home.join(".gemini/tmp/project/chats");
    write(
        &chats.join("session-2026-12-06T09-12-aee68d0b.jsonl"),
        "{\"sessionId\":\"aee68d0b-1\"}\n{\"type\":\"user\"}\n",
    );
    write(
        &chats.join("session-2026-12-06T09-13-aee68d0b.jsonl"),
        "{}\n",
    );
    write(&home.join(".gemini/tmp/project/.project_root"), "/x");
    write(&home.join(".gemini/projects.json"), "{}");
    let files = capture(HarnessKind::GeminiCli, &home, "aee68d0b-1", None)
        .await
        .unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        files[0].path,
        ".gemini/tmp/{project}/chats/session-2026-12-06T09-12-aee68d0b.jsonl"
    );
    let project2 = a.path().join("p2");
    std::fs::create_dir_all(&project2).unwrap();
    let home2 = a.path().join("home2");
    restore(HarnessKind::GeminiCli, &home2, &project2, &files)
        .await
        .unwrap();
    let real = std::fs::canonicalize(&project2).unwrap();
    let hash = hex::encode(sha2::Sha256::digest(real.to_string_lossy().as_bytes()));
    assert!(
        home2
            .join(".gemini/tmp")
            .join(hash)
            .join("chats/session-2026-12-06T09-12-aee68d0b.jsonl")
            .is_file()
    );
}

#[tokio::test]
async fn a_pi_session_is_told_its_new_directory_and_resumed_by_its_file() {
    let a = tempfile::tempdir().unwrap();
    let home = a.path().join("home");
    let file = home
        .join(PI_SESSIONS)
        .join("2026-12-06T09-13-57-321Z_01a2.jsonl");
    write(
        &file,
        "{\"type\":\"session\",\"version\":3,\"id\":\"01a2\",\"cwd\":\"/old/p\"}\n{\"type\":\"message\"}\n",
    );
    let files = capture(HarnessKind::Pi, &home, "01a2", None).await.unwrap();
    assert_eq!(
        files[0].path,
        ".pi/babysitter-sessions/2026-12-06T09-13-57-321Z_01a2.jsonl"
    );
    let home2 = a.path().join("home2");
    let project2 = a.path().join("new/p");
    restore(HarnessKind::Pi, &home2, &project2, &files)
        .await
        .unwrap();
    let target = resume_target(HarnessKind::Pi, &home2, "01a2");
    assert!(target.ends_with("_01a2.jsonl"), "{target}");
    let text = std::fs::read_to_string(&target).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["cwd"], project2.to_string_lossy().as_ref());
    assert_eq!(text.lines().nth(1), Some("{\"type\":\"message\"}"));
    assert_eq!(resume_target(HarnessKind::ClaudeCode, &home2, "s1"), "s1");
}
