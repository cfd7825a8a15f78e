//! Kafka's `ssl.principal.mapping.rules`: how a client certificate's subject (RFC 2253) becomes
//! the name of the connection's `User:` principal.
//!
//! The rules are a comma-separated list, tried in order; the first that applies names the
//! principal:
//! - `DEFAULT`: the subject as it is;
//! - `RULE:pattern/replacement/` with an optional `L` or `U` after the last slash: applies when
//!   `pattern` matches the whole subject; the name is the subject with every match of
//!   `pattern` replaced by `replacement` (`$1`… name groups, `\` escapes the next character),
//!   then lower- or upper-cased. Slashes inside the pattern or replacement are escaped `\/`.
//!
//! A subject no rule applies to has no principal: the connection is refused, as Kafka's
//! principal builder fails it. Rules that do not parse are a start-up error.
//!
//! The splitting and parsing follow Kafka's `SslPrincipalMapper` (its regular expressions,
//! Java's `find` and `replaceAll` semantics, back references beyond the group count kept
//! literally). Patterns are compiled by the `regex` crate, whose syntax is Java's for
//! everything the rules are written with (classes, groups, lazy quantifiers, anchors); Java's
//! back references and look-arounds inside a pattern are refused at start-up.

use regex::{Captures, Regex};

/// Kafka's grammar of one rule: `DEFAULT`, `RULE:pattern/replacement/[LU]`, or anything
/// (which then fails as an unmatched rule).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)";

/// The parsed rules of a listener.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        /// The pattern as written, for `replaceAll`.
        pattern: Regex,
        /// The same, anchored at both ends, for Java's `matches`.
        whole: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Rules that do not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ssl.principal.mapping.rules: {0}")]
pub struct RulesError(String);

impl PrincipalMapper {
    /// Parses `rules` as Kafka does.
    ///
    /// # Errors
    /// [`RulesError`] naming the rule that is not `DEFAULT` or `RULE:…/…/[LU]`, or whose
    /// pattern does not compile.
    pub fn new(rules: &str) -> Result<Self, RulesError> {
        let splitter = Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(,\s*|$)"))
            .map_err(|e| RulesError(e.to_string()))?;
        let parser =
            Regex::new(&format!("^(?:{RULE_PATTERN})")).map_err(|e| RulesError(e.to_string()))?;
        let mut parsed = Vec::new();
        let text = rules.trim();
        for caps in java_find_iter(&splitter, text) {
            let rule = caps.get(1).map_or("", |m| m.as_str());
            let Some(m) = parser.captures(rule) else {
                return Err(RulesError(format!("invalid rule: {rule}")));
            };
            let end = m.get(0).map_or(0, |m| m.end());
            if end != rule.len() {
                return Err(RulesError(format!(
                    "invalid rule: `{rule}`, unmatched substring: `{}`",
                    &rule[end..]
                )));
            }
            if m.get(1).is_some() {
                parsed.push(Rule::Default);
            } else if let (Some(pattern), Some(replacement)) = (m.get(2), m.get(4)) {
                let compile =
                    |p: &str| Regex::new(p).map_err(|e| RulesError(format!("rule `{rule}`: {e}")));
                let case = match m.get(6).map(|c| c.as_str()) {
                    Some("L") => Case::Lower,
                    Some("U") => Case::Upper,
                    _ => Case::Keep,
                };
                parsed.push(Rule::Replace {
                    pattern: compile(pattern.as_str())?,
                    whole: compile(&format!("^(?:{})$", pattern.as_str()))?,
                    replacement: replacement.as_str().to_owned(),
                    case,
                });
            }
            // Otherwise an empty rule (between two commas): ignored, as in Kafka.
        }
        Ok(Self { rules: parsed })
    }

    /// The principal's name for a certificate subject, or `None` when no rule applies.
    pub fn name(&self, subject: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| rule.apply(subject))
    }
}

impl Rule {
    fn apply(&self, subject: &str) -> Option<String> {
        let Rule::Replace {
            pattern,
            whole,
            replacement,
            case,
        } = self
        else {
            return Some(subject.to_owned());
        };
        if !whole.is_match(subject) {
            return None;
        }
        let mut out = String::new();
        let mut last = 0;
        for caps in java_find_iter(pattern, subject) {
            let Some(m) = caps.get(0) else { continue };
            out.push_str(&subject[last..m.start()]);
            expand(replacement, &caps, &mut out);
            last = m.end();
        }
        out.push_str(&subject[last..]);
        Some(match case {
            Case::Keep => out,
            Case::Lower => out.to_lowercase(),
            Case::Upper => out.to_uppercase(),
        })
    }
}

/// The matches of `re` in `text` as Java's `Matcher.find` walks them: after a non-empty match
/// the next search starts where it ended (an empty match may follow there), after an empty
/// one a character further.
fn java_find_iter<'t>(re: &Regex, text: &'t str) -> Vec<Captures<'t>> {
    let mut out = Vec::new();
    let mut from = 0;
    while from <= text.len() {
        let Some(caps) = re.captures_at(text, from) else {
            break;
        };
        let Some(m) = caps.get(0) else { break };
        from = if m.is_empty() {
            match text[m.end()..].chars().next() {
                Some(c) => m.end() + c.len_utf8(),
                None => text.len() + 1,
            }
        } else {
            m.end()
        };
        out.push(caps);
    }
    out
}

/// Java's `appendReplacement`: `\x` is `x`, `$n` is group `n` (digits taken while the number
/// stays a group); a reference beyond the groups stays literal, as Kafka escapes it.
fn expand(replacement: &str, caps: &Captures<'_>, out: &mut String) {
    let groups = caps.len() - 1;
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '$' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                let (group, rest) = group_reference(&digits, groups);
                match group {
                    Some(n) => out.push_str(caps.get(n).map_or("", |m| m.as_str())),
                    None => {
                        out.push('$');
                        out.push_str(&digits[..digits.len() - rest.len()]);
                    }
                }
                out.push_str(rest);
            }
            other => out.push(other),
        }
    }
}

/// The group a run of digits after `$` names, and the digits left over as text: Java takes
/// digits while the number is still a group; a first digit beyond the groups is no reference
/// (Kafka escapes it), except `$0`, the whole match.
fn group_reference(digits: &str, groups: usize) -> (Option<usize>, &str) {
    let first = usize::from(digits.as_bytes()[0] - b'0');
    if first > groups {
        return (None, &digits[1..]);
    }
    let mut number = first;
    let mut used = 1;
    for d in digits.bytes().skip(1) {
        let next = number * 10 + usize::from(d - b'0');
        if next > groups {
            break;
        }
        number = next;
        used += 1;
    }
    (Some(number), &digits[used..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_valid_and_invalid_rules() {
        for valid in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
        ] {
            assert!(PrincipalMapper::new(valid).is_ok(), "{valid}");
        }
        for invalid in [
            "default",
            "DEFAUL",
            "DEFAULT/L",
            "DEFAULT/U",
            "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
            "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        ] {
            assert!(PrincipalMapper::new(invalid).is_err(), "{invalid}");
        }
    }

    #[test]
    fn the_first_rule_that_matches_names_the_principal() {
        let mapper = PrincipalMapper::new(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, \
             RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, \
             RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, \
             RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
        )
        .unwrap();
        for (subject, name) in [
            ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
            ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
            ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
            ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
            (
                "OU=JavaSoft,O=Sun Microsystems,C=US",
                "OU=JavaSoft,O=Sun Microsystems,C=US",
            ),
        ] {
            assert_eq!(mapper.name(subject).as_deref(), Some(name), "{subject}");
        }
    }

    #[test]
    fn an_escaped_comma_in_a_subject_and_no_rule_that_applies() {
        let mapper = PrincipalMapper::new(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").unwrap();
        assert_eq!(
            mapper
                .name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz")
                .as_deref(),
            Some(r"Tkac\, Adam")
        );
        let only = PrincipalMapper::new("RULE:^CN=(.*?),OU=Users$/$1/").unwrap();
        assert_eq!(only.name("CN=a,OU=Users").as_deref(), Some("a"));
        assert_eq!(only.name("CN=a,OU=Admins"), None);
    }

    #[test]
    fn empty_rules_are_ignored_and_references_beyond_the_groups_stay_text() {
        assert_eq!(PrincipalMapper::new("").unwrap().rules.len(), 0);
        assert_eq!(
            PrincipalMapper::new(",   , , ,      , , ,   ")
                .unwrap()
                .rules
                .len(),
            0
        );
        assert_eq!(
            PrincipalMapper::new(",,RULE://,,,DEFAULT,,")
                .unwrap()
                .rules
                .len(),
            2
        );
        let mapper = PrincipalMapper::new(r"RULE:^CN=(\w+)$/$1-$2-$12-\$1/").unwrap();
        assert_eq!(mapper.name("CN=x").as_deref(), Some("x-$2-x2-$1"));
        // An unanchored pattern that also matches empty at the end: Java's replaceAll.
        let mapper = PrincipalMapper::new("RULE:.*/x/").unwrap();
        assert_eq!(mapper.name("CN=a").as_deref(), Some("xx"));
    }
}
