//! Java's JAAS configuration entries as Kafka's `sasl.jaas.config` values spell them:
//! `LoginModule flag key="value" key2=value2;` — one login module, its control flag and its
//! options. The broker reads its listeners' credentials from them (`user_<name>` options of
//! PLAIN), and Shoal's client its own (`username`, `password`), as the Java client does.
//!
//! Must not: put an option's value (a password) in an error message.

use std::collections::BTreeMap;

/// One login-module entry: the module's class name and its options.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasEntry {
    pub module: String,
    pub options: BTreeMap<String, String>,
}

impl std::fmt::Debug for JaasEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Option values are passwords: their names only.
        f.debug_struct("JaasEntry")
            .field("module", &self.module)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Parses one JAAS login-module entry, `Module flag key="value" key2=value2;`. Values are
/// quoted (with `\"` and `\\` escapes) or bare words.
///
/// # Errors
/// An empty entry, a missing control flag, an option without `=`, an unterminated quote, or
/// a missing `;` (messages name options, never their values).
pub fn parse(text: &str) -> Result<JaasEntry, String> {
    let mut rest = text.trim();
    let word = |rest: &mut &str| -> Option<String> {
        let trimmed = rest.trim_start();
        let end = trimmed
            .find(|c: char| c.is_whitespace() || c == ';' || c == '=')
            .unwrap_or(trimmed.len());
        let found = &trimmed[..end];
        *rest = &trimmed[end..];
        (!found.is_empty()).then(|| found.to_string())
    };
    let module = word(&mut rest).ok_or("no JAAS login module is configured")?;
    let flag = word(&mut rest).ok_or("the JAAS entry has no control flag")?;
    if !["required", "requisite", "sufficient", "optional"].contains(&flag.as_str()) {
        return Err(format!("'{flag}' is not a JAAS control flag"));
    }
    let mut options = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(';') {
            if !after.trim().is_empty() {
                return Err("one JAAS login module per entry".into());
            }
            return Ok(JaasEntry { module, options });
        }
        let key = word(&mut rest).ok_or("the JAAS entry does not end with ';'")?;
        rest = rest
            .trim_start()
            .strip_prefix('=')
            .ok_or_else(|| format!("JAAS option {key} has no '='"))?
            .trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(format!("JAAS option {key}: unterminated quote")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("JAAS option {key}: unterminated quote")),
                }
            };
            rest = &quoted[end + 1..];
            value
        } else {
            word(&mut rest).ok_or_else(|| format!("JAAS option {key} has no value"))?
        };
        options.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="a \"quoted\" secret" user_bob=bare;"#;

    #[test]
    fn entries_parse_like_kafkas() {
        let entry = parse(JAAS).unwrap();
        assert_eq!(
            entry.module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(entry.options["user_alice"], "a \"quoted\" secret");
        assert_eq!(entry.options["user_bob"], "bare");
        assert_eq!(entry.options["username"], "admin");
        assert_eq!(parse("M required;").unwrap().options.len(), 0);
        for bad in [
            "",
            "M",
            "M maybe;",
            "M required a=\"x;",
            "M required a;",
            "M required a=1",
            "M required; N required;",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn no_value_reaches_an_error_or_debug() {
        for bad in ["M required pw=\"hunter2", "M required pw=hunter2 x"] {
            let e = parse(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{e}");
        }
        let entry = parse("M required password=hunter2;").unwrap();
        assert!(!format!("{entry:?}").contains("hunter2"));
    }
}
