//! The indexed ACL set and the decision (see the module docs of [`super`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermission, Action,
    PatternType, ResourcePattern, ResourceType, WILDCARD_HOST, WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
};

/// `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    pub super_users: BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Reads Kafka's `super.users` value: principals separated by semicolons
    /// (`User:admin;User:ops`), blanks ignored.
    pub fn parse_super_users(value: &str) -> BTreeSet<String> {
        value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

type Entries = Vec<AccessControlEntry>;

/// The ACLs of one resource type.
#[derive(Debug, Default, Clone)]
struct TypeIndex {
    /// LITERAL patterns by name (`*` included).
    literal: HashMap<String, Entries>,
    /// PREFIXED patterns.
    prefixed: Prefixes,
}

/// Every ACL, indexed for checks. Holds no lock: the broker puts it behind one.
#[derive(Debug, Default, Clone)]
pub struct Authorizer {
    config: AuthorizerConfig,
    by_type: HashMap<ResourceType, TypeIndex>,
    count: usize,
}

/// What one ACL said about an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    Deny,
}

impl Authorizer {
    pub fn new(config: AuthorizerConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// How many ACLs there are.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn entries_mut(&mut self, pattern: &ResourcePattern) -> Option<&mut Entries> {
        let index = self.by_type.entry(pattern.resource_type).or_default();
        match pattern.pattern_type {
            PatternType::Literal => Some(index.literal.entry(pattern.name.clone()).or_default()),
            PatternType::Prefixed => Some(index.prefixed.entry(&pattern.name)),
            _ => None,
        }
    }

    /// Adds `binding`; `false` if it was already there (adding is idempotent, as in Kafka).
    /// A binding that is not LITERAL or PREFIXED is not stored (validation refuses it first).
    pub fn add(&mut self, binding: AclBinding) -> bool {
        let Some(entries) = self.entries_mut(&binding.pattern) else {
            return false;
        };
        if entries.contains(&binding.entry) {
            return false;
        }
        entries.push(binding.entry);
        self.count += 1;
        true
    }

    /// Removes `binding`; `false` if it was not there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        let Some(index) = self.by_type.get_mut(&binding.pattern.resource_type) else {
            return false;
        };
        let name = &binding.pattern.name;
        let removed = match binding.pattern.pattern_type {
            PatternType::Literal => remove_entry(&mut index.literal, name, &binding.entry),
            PatternType::Prefixed => index.prefixed.remove(name, &binding.entry),
            _ => false,
        };
        if removed {
            self.count -= 1;
        }
        removed
    }

    /// Every ACL, in a stable order (resource type, name, pattern type, then as added).
    pub fn bindings(&self) -> Vec<AclBinding> {
        let mut all = Vec::with_capacity(self.count);
        for (resource_type, index) in &self.by_type {
            let lists = index
                .literal
                .iter()
                .map(|(n, e)| (n, PatternType::Literal, e))
                .chain(
                    index
                        .prefixed
                        .by_prefix
                        .iter()
                        .map(|(n, e)| (n, PatternType::Prefixed, e)),
                );
            for (name, pattern_type, entries) in lists {
                for entry in entries {
                    all.push(AclBinding {
                        pattern: ResourcePattern {
                            resource_type: *resource_type,
                            name: name.clone(),
                            pattern_type,
                        },
                        entry: entry.clone(),
                    });
                }
            }
        }
        all.sort_by(|a, b| a.pattern.cmp(&b.pattern));
        all
    }

    /// The ACLs `filter` matches (DescribeAcls, DeleteAcls).
    pub fn matching(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.bindings()
            .into_iter()
            .filter(|b| filter.matches(b))
            .collect()
    }

    pub fn is_super_user(&self, principal: &str) -> bool {
        self.config.super_users.contains(principal)
    }

    /// Decides `action` (see the module docs): `true` for ALLOWED.
    pub fn authorize(&self, action: &Action<'_>) -> bool {
        if self.is_super_user(action.principal) {
            return true;
        }
        let mut found_any = false;
        let mut allowed = false;
        let mut verdict = |entries: &Entries| -> bool {
            found_any |= !entries.is_empty();
            for entry in entries {
                match entry_verdict(action, entry) {
                    Some(Verdict::Deny) => return true,
                    Some(Verdict::Allow) => allowed = true,
                    None => {}
                }
            }
            false
        };
        if let Some(index) = self.by_type.get(&action.resource_type) {
            for name in [action.name, WILDCARD_RESOURCE] {
                if let Some(entries) = index.literal.get(name) {
                    if verdict(entries) {
                        return false;
                    }
                }
                if action.name == WILDCARD_RESOURCE {
                    break;
                }
            }
            let mut denied = false;
            index.prefixed.for_each_prefix_of(action.name, |entries| {
                denied = verdict(entries);
                denied
            });
            if denied {
                return false;
            }
        }
        if allowed {
            return true;
        }
        !found_any && self.config.allow_everyone_if_no_acl_found
    }

    /// Kafka's `authorizeByResourceType`: whether `principal` at `host` may do `operation` on
    /// some resource of `resource_type` (an idempotent producer's WRITE on any topic). Allowed
    /// for a super user or where a resource named `hardcode` would be; denied by a DENY on the
    /// wildcard; otherwise allowed if some ALLOW pattern is not shadowed by a DENY (the same
    /// LITERAL name, or a PREFIXED prefix of it).
    pub fn authorize_by_resource_type(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        operation: AclOperation,
    ) -> bool {
        let probe = Action {
            principal,
            host,
            resource_type,
            name: "hardcode",
            operation,
        };
        if self.authorize(&probe) {
            return true;
        }
        let Some(index) = self.by_type.get(&resource_type) else {
            return false;
        };
        let applies = |e: &AccessControlEntry| {
            (e.host == WILDCARD_HOST || e.host == host)
                && (e.principal == principal || e.principal == WILDCARD_PRINCIPAL)
                && (e.operation == operation || e.operation == AclOperation::All)
        };
        let mut deny_literal = BTreeSet::new();
        let mut deny_prefixed = BTreeSet::new();
        let mut allow: Vec<(&str, PatternType)> = Vec::new();
        let lists = index
            .literal
            .iter()
            .map(|(n, e)| (n, PatternType::Literal, e))
            .chain(
                index
                    .prefixed
                    .by_prefix
                    .iter()
                    .map(|(n, e)| (n, PatternType::Prefixed, e)),
            );
        for (name, pattern_type, entries) in lists {
            for entry in entries.iter().filter(|e| applies(e)) {
                match (entry.permission, pattern_type) {
                    (AclPermission::Deny, PatternType::Literal) if name == WILDCARD_RESOURCE => {
                        return false;
                    }
                    (AclPermission::Deny, PatternType::Literal) => {
                        deny_literal.insert(name.as_str());
                    }
                    (AclPermission::Deny, _) => {
                        deny_prefixed.insert(name.as_str());
                    }
                    (AclPermission::Allow, _) => allow.push((name, pattern_type)),
                    _ => {}
                }
            }
        }
        if allow
            .iter()
            .any(|(n, t)| *n == WILDCARD_RESOURCE && *t == PatternType::Literal)
        {
            return true;
        }
        allow.iter().any(|(name, pattern_type)| {
            if *pattern_type == PatternType::Literal && deny_literal.contains(name) {
                return false;
            }
            !name
                .char_indices()
                .map(|(i, c)| &name[..i + c.len_utf8()])
                .any(|prefix| deny_prefixed.contains(prefix))
        })
    }
}

fn remove_entry(
    map: &mut HashMap<String, Entries>,
    name: &str,
    entry: &AccessControlEntry,
) -> bool {
    let Some(entries) = map.get_mut(name) else {
        return false;
    };
    let Some(at) = entries.iter().position(|e| e == entry) else {
        return false;
    };
    entries.remove(at);
    if entries.is_empty() {
        map.remove(name);
    }
    true
}

/// What `entry` says about `action`, whose resource its pattern matches; `None` when it does
/// not apply (another principal or host, an operation it does not cover).
fn entry_verdict(action: &Action<'_>, entry: &AccessControlEntry) -> Option<Verdict> {
    if entry.principal != action.principal && entry.principal != WILDCARD_PRINCIPAL {
        return None;
    }
    if entry.host != WILDCARD_HOST && entry.host != action.host {
        return None;
    }
    match entry.permission {
        AclPermission::Deny if entry.operation.deny_covers(action.operation) => Some(Verdict::Deny),
        AclPermission::Allow if entry.operation.allow_covers(action.operation) => {
            Some(Verdict::Allow)
        }
        _ => None,
    }
}

/// The PREFIXED patterns of one resource type: by prefix, with the lengths in use.
#[derive(Debug, Default, Clone)]
struct Prefixes {
    by_prefix: HashMap<String, Entries>,
    /// How many prefixes have each length (in bytes).
    lengths: BTreeMap<usize, usize>,
}

impl Prefixes {
    fn entry(&mut self, prefix: &str) -> &mut Entries {
        if !self.by_prefix.contains_key(prefix) {
            *self.lengths.entry(prefix.len()).or_default() += 1;
        }
        self.by_prefix.entry(prefix.to_string()).or_default()
    }

    fn remove(&mut self, prefix: &str, entry: &AccessControlEntry) -> bool {
        let Some(entries) = self.by_prefix.get_mut(prefix) else {
            return false;
        };
        let Some(at) = entries.iter().position(|e| e == entry) else {
            return false;
        };
        entries.remove(at);
        if entries.is_empty() {
            self.by_prefix.remove(prefix);
            let count = self.lengths.get_mut(&prefix.len()).expect("counted length");
            *count -= 1;
            if *count == 0 {
                self.lengths.remove(&prefix.len());
            }
        }
        true
    }

    /// Calls `visit` with the entries of every prefix of `name` that has any, until `visit`
    /// returns `true`. One hash lookup per prefix length in use, whatever the number of
    /// ACLs; at most `name.len()` of them.
    fn for_each_prefix_of(&self, name: &str, mut visit: impl FnMut(&Entries) -> bool) {
        for &len in self.lengths.range(..=name.len()).map(|(len, _)| len) {
            if !name.is_char_boundary(len) {
                continue;
            }
            if let Some(entries) = self.by_prefix.get(&name[..len]) {
                if visit(entries) {
                    return;
                }
            }
        }
    }
}
