//! The profiles' markdown (the reference's `renderUserProfileMarkdown` /
//! `renderProjectProfileMarkdown`), line for line: `profile:render`, `profile:read` without
//! `--json`, and the `*.md` written beside each profile. Values are printed as a JavaScript
//! template literal prints them; a section whose field is missing or of another shape is left
//! out (the reference throws on some of those).

use serde_json::Value;

use crate::compat::output::{js_template, js_truthy};

/// `${obj.key}`.
fn t(v: &Value, key: &str) -> String {
    js_template(v.get(key))
}

/// `if (obj.key)`.
fn yes(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(js_truthy)
}

/// `obj.key ?? ""`.
fn or_empty(v: &Value, key: &str) -> String {
    match v.get(key) {
        None | Some(Value::Null) => String::new(),
        other => js_template(other),
    }
}

/// `obj.key` as an array (empty when missing or not an array).
fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `obj.key.join(sep)`.
fn join(v: &Value, key: &str, sep: &str) -> String {
    list(v, key)
        .iter()
        .map(|x| match x {
            Value::Null => String::new(),
            other => js_template(Some(other)),
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// ` <before>${obj.key}<after>` when the field is truthy, else nothing.
fn opt(v: &Value, key: &str, before: &str, after: &str) -> String {
    if yes(v, key) {
        format!("{before}{}{after}", t(v, key))
    } else {
        String::new()
    }
}

fn entries(v: &Value, key: &str) -> Vec<(String, Value)> {
    v.get(key)
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

const NONE: Value = Value::Null;

fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or(&NONE)
}

pub fn user(p: &Value) -> String {
    let mut l: Vec<String> = vec![
        format!("# User Profile: {}", t(p, "name")),
        String::new(),
        format!(
            "> Last updated: {} | Version: {}",
            t(p, "updatedAt"),
            t(p, "version")
        ),
        String::new(),
    ];
    if !list(p, "specialties").is_empty() {
        l.extend(["## Specialties".into(), String::new()]);
        for s in list(p, "specialties") {
            let sub = if list(s, "subdomains").is_empty() {
                String::new()
            } else {
                format!(" ({})", join(s, "subdomains", ", "))
            };
            let years = if s.get("yearsActive").is_some() {
                format!(" - {} years", t(s, "yearsActive"))
            } else {
                String::new()
            };
            l.push(format!("- **{}**{sub}{years}", t(s, "domain")));
        }
        l.push(String::new());
    }
    let expertise = entries(p, "expertiseLevels");
    if !expertise.is_empty() {
        l.extend([
            "## Expertise Levels".into(),
            String::new(),
            "| Skill | Level | Confidence |".into(),
            "|-------|-------|------------|".into(),
        ]);
        for (skill, rating) in &expertise {
            let confidence = match rating.get("confidence") {
                None => "-".to_owned(),
                Some(c) => format!("{}%", (c.as_f64().unwrap_or(0.0) * 100.0 + 0.5).floor()),
            };
            l.push(format!(
                "| {skill} | {} | {confidence} |",
                t(rating, "level")
            ));
        }
        l.push(String::new());
    }
    if !list(p, "goals").is_empty() {
        l.extend(["## Goals".into(), String::new()]);
        for g in list(p, "goals") {
            l.push(format!(
                "- **{}**{}: {}{}",
                t(g, "category"),
                opt(g, "priority", " [", "]"),
                t(g, "description"),
                opt(g, "status", " (", ")"),
            ));
        }
        l.push(String::new());
    }
    l.extend(["## Preferences".into(), String::new()]);
    let prefs = field(p, "preferences");
    for (key, label) in [
        ("verbosity", "Verbosity"),
        ("autonomyLevel", "Autonomy"),
        ("riskTolerance", "Risk tolerance"),
        ("learningStyle", "Learning style"),
    ] {
        if yes(prefs, key) {
            l.push(format!("- {label}: {}", t(prefs, key)));
        }
    }
    if yes(prefs, "workingHours") {
        let wh = field(prefs, "workingHours");
        let mut parts = Vec::new();
        if yes(wh, "start") && yes(wh, "end") {
            parts.push(format!("{}-{}", t(wh, "start"), t(wh, "end")));
        }
        if yes(wh, "timezone") {
            parts.push(t(wh, "timezone"));
        }
        if !parts.is_empty() {
            l.push(format!("- Working hours: {}", parts.join(" ")));
        }
    }
    l.push(String::new());
    let tools = entries(p, "toolPreferences");
    if !tools.is_empty() {
        l.extend(["## Tool Preferences".into(), String::new()]);
        for (key, value) in &tools {
            match value {
                Value::Array(_) => l.push(format!("- {key}: {}", js_list(value, ", "))),
                Value::String(s) => l.push(format!("- {key}: {s}")),
                _ => {}
            }
        }
        l.push(String::new());
    }
    l.extend(["## Breakpoint Tolerance".into(), String::new()]);
    let bt = field(p, "breakpointTolerance");
    l.push(format!("- Global: **{}**", t(bt, "global")));
    if yes(bt, "skipBreakpointsForKnownPatterns") {
        l.push("- Skip known patterns: yes".into());
    }
    if !list(bt, "alwaysBreakOn").is_empty() {
        l.push(format!(
            "- Always break on: {}",
            join(bt, "alwaysBreakOn", ", ")
        ));
    }
    if yes(bt, "perCategory") {
        for (category, level) in entries(bt, "perCategory") {
            l.push(format!("- {category}: {}", js_template(Some(&level))));
        }
    }
    l.push(String::new());
    l.extend(["## Communication Style".into(), String::new()]);
    let cs = field(p, "communicationStyle");
    l.extend(line_if(cs, "tone", "Tone"));
    l.extend(line_if(cs, "language", "Language"));
    if cs.get("useEmojis").is_some() {
        let emojis = if yes(cs, "useEmojis") { "yes" } else { "no" };
        l.push(format!("- Emojis: {emojis}"));
    }
    l.extend(line_if(cs, "explanationDepth", "Explanation depth"));
    l.extend(line_if(cs, "preferredResponseFormat", "Response format"));
    l.push(String::new());
    experience(&mut l, field(p, "experience"));
    if !list(p, "socialProfiles").is_empty() {
        l.extend(["## Social Profiles".into(), String::new()]);
        for s in list(p, "socialProfiles") {
            l.push(format!(
                "- [{}]({}){}",
                t(s, "platform"),
                t(s, "url"),
                opt(s, "username", " (@", ")")
            ));
        }
        l.push(String::new());
    }
    extensions(
        &mut l,
        p,
        &[
            ("installedPlugins", "Plugins"),
            ("installedSkills", "Skills"),
            ("installedAgents", "Agents"),
        ],
    );
    l.join("\n")
}

fn js_list(v: &Value, sep: &str) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| match x {
                    Value::Null => String::new(),
                    other => js_template(Some(other)),
                })
                .collect::<Vec<_>>()
                .join(sep)
        })
        .unwrap_or_default()
}

/// `- <label>: ${obj.key}` when the field is truthy.
fn line_if(v: &Value, key: &str, label: &str) -> Option<String> {
    yes(v, key).then(|| format!("- {label}: {}", t(v, key)))
}

fn experience(l: &mut Vec<String>, e: &Value) {
    let has = yes(e, "currentRole")
        || yes(e, "currentOrganization")
        || e.get("totalYearsProfessional").is_some()
        || !list(e, "previousRoles").is_empty();
    if !has {
        return;
    }
    l.extend(["## Experience".into(), String::new()]);
    if e.get("totalYearsProfessional").is_some() {
        l.push(format!("- Total years: {}", t(e, "totalYearsProfessional")));
    }
    l.extend(line_if(e, "currentRole", "Current role"));
    l.extend(line_if(e, "currentOrganization", "Organization"));
    if !list(e, "industries").is_empty() {
        l.push(format!("- Industries: {}", join(e, "industries", ", ")));
    }
    if !list(e, "previousRoles").is_empty() {
        l.push("- Previous roles:".into());
        for r in list(e, "previousRoles") {
            l.push(format!(
                "  - {}{}{}",
                t(r, "title"),
                opt(r, "organization", " at ", ""),
                opt(r, "duration", " (", ")")
            ));
        }
    }
    if !list(e, "education").is_empty() {
        l.push("- Education:".into());
        for ed in list(e, "education") {
            let parts: Vec<String> = [
                opt(ed, "degree", "", ""),
                opt(ed, "field", "in ", ""),
                opt(ed, "institution", "from ", ""),
                opt(ed, "year", "(", ")"),
            ]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
            l.push(format!("  - {}", parts.join(" ")));
        }
    }
    if !list(e, "certifications").is_empty() {
        l.push(format!(
            "- Certifications: {}",
            join(e, "certifications", ", ")
        ));
    }
    l.push(String::new());
}

/// `## Installed Extensions` with one line per non-empty list.
fn extensions(l: &mut Vec<String>, p: &Value, lists: &[(&str, &str)]) {
    if lists.iter().all(|(k, _)| list(p, k).is_empty()) {
        return;
    }
    l.extend(["## Installed Extensions".into(), String::new()]);
    for (key, label) in lists {
        if !list(p, key).is_empty() {
            l.push(format!("- {label}: {}", join(p, key, ", ")));
        }
    }
    l.push(String::new());
}

pub fn project(p: &Value) -> String {
    let mut l: Vec<String> = vec![
        format!("# Project Profile: {}", t(p, "projectName")),
        String::new(),
    ];
    if yes(p, "description") {
        l.extend([t(p, "description"), String::new()]);
    }
    l.extend([
        format!(
            "> Last updated: {} | Version: {}",
            t(p, "updatedAt"),
            t(p, "version")
        ),
        String::new(),
    ]);
    if !list(p, "goals").is_empty() {
        l.extend(["## Goals".into(), String::new()]);
        for g in list(p, "goals") {
            l.push(format!(
                "- {}{}: {}{}",
                opt(g, "category", "**", "**"),
                opt(g, "priority", " [", "]"),
                t(g, "description"),
                opt(g, "status", " (", ")"),
            ));
        }
        l.push(String::new());
    }
    tech_stack(&mut l, field(p, "techStack"));
    architecture(&mut l, field(p, "architecture"));
    bullets(&mut l, p, "team", "Team", |m| {
        let resp = if list(m, "responsibilities").is_empty() {
            String::new()
        } else {
            format!(": {}", join(m, "responsibilities", ", "))
        };
        vec![format!("- **{}** ({}){resp}", t(m, "name"), t(m, "role"))]
    });
    if !list(p, "workflows").is_empty() {
        l.extend(["## Workflows".into(), String::new()]);
        for w in list(p, "workflows") {
            l.extend([format!("### {}", t(w, "name")), String::new()]);
            if yes(w, "description") {
                l.push(t(w, "description"));
            }
            if !list(w, "triggers").is_empty() {
                l.push(format!("**Triggers:** {}", join(w, "triggers", ", ")));
            }
            if !list(w, "steps").is_empty() {
                l.push(String::new());
                for (i, step) in list(w, "steps").iter().enumerate() {
                    l.push(format!("{}. {}", i + 1, js_template(Some(step))));
                }
            }
            l.push(String::new());
        }
    }
    bullets(&mut l, p, "processes", "Processes", |x| {
        vec![format!(
            "- **{}** (`{}`, {}){}",
            t(x, "name"),
            t(x, "id"),
            t(x, "type"),
            opt(x, "description", " - ", "")
        )]
    });
    let tools = field(p, "tools");
    if ["linting", "testing", "formatting"]
        .iter()
        .any(|k| !list(tools, k).is_empty())
    {
        l.extend(["## Tools".into(), String::new()]);
        for (key, heading, command) in [
            ("linting", "Linting", false),
            ("testing", "Testing", true),
            ("formatting", "Formatting", false),
        ] {
            named_list(&mut l, tools, key, heading, |x| {
                let cmd = if command {
                    opt(x, "command", " `", "`")
                } else {
                    String::new()
                };
                format!("{}{}{cmd}", t(x, "name"), opt(x, "configPath", " (`", "`)"))
            });
        }
    }
    bullets(&mut l, p, "services", "Services", |s| {
        vec![format!(
            "- **{}** ({}){}",
            t(s, "name"),
            t(s, "type"),
            opt(s, "url", " - ", "")
        )]
    });
    if yes(p, "cicd") {
        let c = field(p, "cicd");
        l.extend(["## CI/CD".into(), String::new()]);
        if yes(c, "provider") {
            l.push(format!("**Provider:** {}", t(c, "provider")));
        }
        if !list(c, "configPaths").is_empty() {
            l.push(format!("**Config files:** {}", code_list(c, "configPaths")));
        }
        if !list(c, "pipelines").is_empty() {
            l.extend([String::new(), "### Pipelines".into(), String::new()]);
            for pl in list(c, "pipelines") {
                l.push(format!(
                    "- **{}**{}",
                    t(pl, "name"),
                    opt(pl, "trigger", " (trigger: ", ")")
                ));
                if !list(pl, "stages").is_empty() {
                    l.push(format!("  Stages: {}", join(pl, "stages", " -> ")));
                }
            }
        }
        l.push(String::new());
    }
    bullets(&mut l, p, "painPoints", "Pain Points", |x| {
        let mut out = vec![format!(
            "- **{}**{}: {}",
            t(x, "severity"),
            opt(x, "category", " [", "]"),
            t(x, "description")
        )];
        out.extend(
            yes(x, "suggestedRemediation")
                .then(|| format!("  - Remediation: {}", t(x, "suggestedRemediation"))),
        );
        out
    });
    bullets(&mut l, p, "bottlenecks", "Bottlenecks", |x| {
        vec![
            format!(
                "- {}{}{}",
                t(x, "description"),
                opt(x, "location", " at ", ""),
                opt(x, "frequency", " (", ")")
            ),
            format!("  Impact: {}", t(x, "impact")),
        ]
    });
    conventions(&mut l, field(p, "conventions"));
    bullets(&mut l, p, "repositories", "Repositories", |r| {
        let primary = if yes(r, "isPrimary") {
            " (primary)"
        } else {
            ""
        };
        vec![format!(
            "- **{}**{primary}{}{}",
            t(r, "name"),
            opt(r, "url", " - ", ""),
            opt(r, "path", " [`", "`]")
        )]
    });
    bullets(
        &mut l,
        p,
        "claudeMdInstructions",
        "CLAUDE.md Instructions",
        |x| vec![format!("- {}", js_template(Some(x)))],
    );
    extensions(
        &mut l,
        p,
        &[
            ("installedSkills", "Skills"),
            ("installedAgents", "Agents"),
            ("installedProcesses", "Processes"),
        ],
    );
    l.join("\n")
}

/// `` `a`, `b` ``.
fn code_list(v: &Value, key: &str) -> String {
    list(v, key)
        .iter()
        .map(|x| format!("`{}`", js_template(Some(x))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `## <heading>`, the lines of each item, a blank line; nothing for an empty list.
fn bullets(
    l: &mut Vec<String>,
    p: &Value,
    key: &str,
    heading: &str,
    item: impl Fn(&Value) -> Vec<String>,
) {
    if list(p, key).is_empty() {
        return;
    }
    l.extend([format!("## {heading}"), String::new()]);
    for x in list(p, key) {
        l.extend(item(x));
    }
    l.push(String::new());
}

/// `### <heading>`, `- <item>` each, a blank line; nothing for an empty list.
fn named_list(
    l: &mut Vec<String>,
    v: &Value,
    key: &str,
    heading: &str,
    item: impl Fn(&Value) -> String,
) {
    if list(v, key).is_empty() {
        return;
    }
    l.extend([format!("### {heading}"), String::new()]);
    for x in list(v, key) {
        l.push(format!("- {}", item(x)));
    }
    l.push(String::new());
}

/// An optional field printed as `<before><value><after>`.
type Affixed = (&'static str, &'static str, &'static str);

fn tech_stack(l: &mut Vec<String>, ts: &Value) {
    let keys = [
        "languages",
        "frameworks",
        "databases",
        "infrastructure",
        "buildTools",
        "packageManagers",
    ];
    if keys.iter().all(|k| list(ts, k).is_empty()) {
        return;
    }
    l.extend(["## Tech Stack".into(), String::new()]);
    // `name` then each optional field with its affixes, in the reference's order.
    let lists: [(&str, &str, &[Affixed]); 4] = [
        (
            "languages",
            "Languages",
            &[("version", " v", ""), ("role", " (", ")")],
        ),
        (
            "frameworks",
            "Frameworks",
            &[("version", " v", ""), ("category", " [", "]")],
        ),
        (
            "databases",
            "Databases",
            &[("type", " (", ")"), ("version", " v", "")],
        ),
        (
            "infrastructure",
            "Infrastructure",
            &[("category", " [", "]")],
        ),
    ];
    for (key, heading, fields) in lists {
        named_list(l, ts, key, heading, |e| {
            let mut line = t(e, "name");
            for (f, before, after) in fields {
                line.push_str(&opt(e, f, before, after));
            }
            line
        });
    }
    if !list(ts, "buildTools").is_empty() {
        l.extend([
            format!("**Build tools:** {}", join(ts, "buildTools", ", ")),
            String::new(),
        ]);
    }
    if !list(ts, "packageManagers").is_empty() {
        l.extend([
            format!(
                "**Package managers:** {}",
                join(ts, "packageManagers", ", ")
            ),
            String::new(),
        ]);
    }
}

fn architecture(l: &mut Vec<String>, a: &Value) {
    if !(yes(a, "pattern") || !list(a, "modules").is_empty() || !list(a, "entryPoints").is_empty())
    {
        return;
    }
    l.extend(["## Architecture".into(), String::new()]);
    if yes(a, "pattern") {
        l.push(format!("**Pattern:** {}", t(a, "pattern")));
    }
    if yes(a, "dataFlow") {
        l.push(format!("**Data flow:** {}", t(a, "dataFlow")));
    }
    l.push(String::new());
    if !list(a, "modules").is_empty() {
        l.extend([
            "### Modules".into(),
            String::new(),
            "| Module | Path | Description |".into(),
            "|--------|------|-------------|".into(),
        ]);
        for m in list(a, "modules") {
            l.push(format!(
                "| {} | `{}` | {} |",
                t(m, "name"),
                t(m, "path"),
                or_empty(m, "description")
            ));
        }
        l.push(String::new());
    }
    if !list(a, "entryPoints").is_empty() {
        l.extend([
            format!("**Entry points:** {}", code_list(a, "entryPoints")),
            String::new(),
        ]);
    }
}

fn conventions(l: &mut Vec<String>, c: &Value) {
    let has = yes(c, "naming")
        || yes(c, "git")
        || yes(c, "errorHandling")
        || yes(c, "testingConventions")
        || !list(c, "additionalRules").is_empty();
    if !has {
        return;
    }
    l.extend(["## Conventions".into(), String::new()]);
    for (key, heading) in [("naming", "Naming"), ("git", "Git")] {
        if yes(c, key) {
            l.extend([format!("### {heading}"), String::new()]);
            for (k, v) in entries(c, key) {
                l.push(format!("- **{k}:** {}", js_template(Some(&v))));
            }
            l.push(String::new());
        }
    }
    if !list(c, "importOrder").is_empty() {
        l.extend([
            format!("**Import order:** {}", join(c, "importOrder", " > ")),
            String::new(),
        ]);
    }
    if yes(c, "errorHandling") {
        l.extend([
            format!("**Error handling:** {}", t(c, "errorHandling")),
            String::new(),
        ]);
    }
    if yes(c, "testingConventions") {
        l.extend([
            format!("**Testing:** {}", t(c, "testingConventions")),
            String::new(),
        ]);
    }
    if !list(c, "additionalRules").is_empty() {
        l.extend(["### Additional Rules".into(), String::new()]);
        for r in list(c, "additionalRules") {
            l.push(format!("- {}", js_template(Some(r))));
        }
        l.push(String::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn user_markdown_matches_the_reference_layout() {
        let p = json!({
            "name": "Ada", "updatedAt": "T", "version": 2,
            "specialties": [{"domain": "web", "subdomains": ["css", "html"], "yearsActive": 3}],
            "expertiseLevels": {"rust": {"level": "expert", "confidence": 0.86}},
            "goals": [], "preferences": {"verbosity": "terse", "workingHours": {"start": "9", "end": "17", "timezone": "UTC"}},
            "toolPreferences": {"editor": "vim", "languages": ["rust", "go"], "n": 1},
            "breakpointTolerance": {"global": "low", "alwaysBreakOn": ["deploy"]},
            "communicationStyle": {"tone": "casual", "useEmojis": false},
            "experience": {},
        });
        assert_eq!(
            user(&p),
            "# User Profile: Ada\n\n> Last updated: T | Version: 2\n\n## Specialties\n\n- **web** (css, html) - 3 years\n\n## Expertise Levels\n\n| Skill | Level | Confidence |\n|-------|-------|------------|\n| rust | expert | 86% |\n\n## Preferences\n\n- Verbosity: terse\n- Working hours: 9-17 UTC\n\n## Tool Preferences\n\n- editor: vim\n- languages: rust, go\n\n## Breakpoint Tolerance\n\n- Global: **low**\n- Always break on: deploy\n\n## Communication Style\n\n- Tone: casual\n- Emojis: no\n"
        );
    }

    #[test]
    fn project_markdown_sections() {
        let p = json!({
            "projectName": "P", "description": "D", "updatedAt": "T", "version": 1,
            "goals": [{"description": "ship", "priority": "high"}],
            "techStack": {"languages": [{"name": "ts", "version": "5"}], "buildTools": ["vite"]},
            "architecture": {}, "workflows": [], "tools": {"testing": [{"name": "vitest", "command": "npm t"}]},
            "conventions": {},
        });
        assert_eq!(
            project(&p),
            "# Project Profile: P\n\nD\n\n> Last updated: T | Version: 1\n\n## Goals\n\n-  [high]: ship\n\n## Tech Stack\n\n### Languages\n\n- ts v5\n\n**Build tools:** vite\n\n## Tools\n\n### Testing\n\n- vitest `npm t`\n"
        );
    }
}
