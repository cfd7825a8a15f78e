use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    host: &str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: name.into(),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        },
    }
}

fn topic_allow(name: &str, pattern: PatternType, principal: &str, op: AclOperation) -> AclBinding {
    acl(
        ResourceType::Topic,
        name,
        pattern,
        principal,
        "*",
        op,
        AclPermission::Allow,
    )
}

fn can(
    a: &Authorizer,
    principal: &str,
    host: &str,
    t: ResourceType,
    name: &str,
    op: AclOperation,
) -> bool {
    a.authorize(&Action {
        principal,
        host,
        resource_type: t,
        name,
        operation: op,
    })
}

fn topic(a: &Authorizer, principal: &str, name: &str, op: AclOperation) -> bool {
    can(a, principal, "10.0.0.1", ResourceType::Topic, name, op)
}

use AclOperation::*;
use PatternType::{Literal, Prefixed};

#[test]
fn no_acl_denies_unless_allow_everyone() {
    let a = Authorizer::new(AuthorizerConfig::default());
    assert!(!topic(&a, "User:alice", "t", Read));
    let a = Authorizer::new(AuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..AuthorizerConfig::default()
    });
    assert!(topic(&a, "User:alice", "t", Read));
}

#[test]
fn an_acl_for_someone_else_still_counts_as_an_acl() {
    let mut a = Authorizer::new(AuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..AuthorizerConfig::default()
    });
    a.add(topic_allow("t", Literal, "User:bob", Read));
    assert!(!topic(&a, "User:alice", "t", Read));
    assert!(topic(&a, "User:bob", "t", Read));
    // Another topic still has none.
    assert!(topic(&a, "User:alice", "u", Read));
}

#[test]
fn literal_prefixed_and_wildcard_patterns() {
    let mut a = Authorizer::default();
    a.add(topic_allow("orders", Literal, "User:alice", Read));
    a.add(topic_allow("pay", Prefixed, "User:bob", Write));
    a.add(topic_allow("*", Literal, "User:carol", Read));
    assert!(topic(&a, "User:alice", "orders", Read));
    assert!(!topic(&a, "User:alice", "orders2", Read));
    assert!(topic(&a, "User:bob", "payments", Write));
    assert!(topic(&a, "User:bob", "pay", Write));
    assert!(!topic(&a, "User:bob", "pa", Write));
    assert!(!topic(&a, "User:bob", "xpayments", Write));
    assert!(topic(&a, "User:carol", "anything", Read));
    assert!(!topic(&a, "User:carol", "anything", Write));
}

#[test]
fn wildcard_principal_and_hosts() {
    let mut a = Authorizer::default();
    a.add(acl(
        ResourceType::Topic,
        "t",
        Literal,
        "User:*",
        "10.0.0.1",
        Read,
        AclPermission::Allow,
    ));
    assert!(can(
        &a,
        "User:x",
        "10.0.0.1",
        ResourceType::Topic,
        "t",
        Read
    ));
    assert!(!can(
        &a,
        "User:x",
        "10.0.0.2",
        ResourceType::Topic,
        "t",
        Read
    ));
}

#[test]
fn deny_wins_and_is_not_implied() {
    let mut a = Authorizer::default();
    a.add(topic_allow("t", Literal, "User:*", All));
    a.add(acl(
        ResourceType::Topic,
        "t",
        Prefixed,
        "User:alice",
        "*",
        Read,
        AclPermission::Deny,
    ));
    assert!(!topic(&a, "User:alice", "t", Read));
    // DENY READ does not deny DESCRIBE; ALL allows it.
    assert!(topic(&a, "User:alice", "t", Describe));
    assert!(topic(&a, "User:bob", "t", Read));
    a.add(acl(
        ResourceType::Topic,
        "*",
        Literal,
        "User:bob",
        "*",
        All,
        AclPermission::Deny,
    ));
    assert!(!topic(&a, "User:bob", "t", Describe));
}

#[test]
fn implied_describe() {
    let mut a = Authorizer::default();
    for (i, op) in [Read, Write, Delete, Alter, Describe]
        .into_iter()
        .enumerate()
    {
        let name = format!("t{i}");
        a.add(topic_allow(&name, Literal, "User:u", op));
        assert!(topic(&a, "User:u", &name, Describe), "{op:?}");
    }
    a.add(topic_allow("c", Literal, "User:u", Create));
    assert!(!topic(&a, "User:u", "c", Describe));
    a.add(topic_allow("cfg", Literal, "User:u", AlterConfigs));
    assert!(topic(&a, "User:u", "cfg", DescribeConfigs));
    assert!(!topic(&a, "User:u", "cfg", Describe));
    assert!(!topic(&a, "User:u", "t0", Write));
}

#[test]
fn super_users_bypass_denies() {
    let config = AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users(" User:admin ;User:ops;"),
        allow_everyone_if_no_acl_found: false,
    };
    assert_eq!(config.super_users.len(), 2);
    let mut a = Authorizer::new(config);
    a.add(acl(
        ResourceType::Topic,
        "*",
        Literal,
        "User:*",
        "*",
        All,
        AclPermission::Deny,
    ));
    assert!(topic(&a, "User:admin", "t", Write));
    assert!(topic(&a, "User:ops", "t", Write));
    assert!(!topic(&a, "User:other", "t", Write));
}

#[test]
fn resource_types_are_separate() {
    let mut a = Authorizer::default();
    a.add(acl(
        ResourceType::Group,
        "g",
        Literal,
        "User:u",
        "*",
        Read,
        AclPermission::Allow,
    ));
    assert!(can(&a, "User:u", "h", ResourceType::Group, "g", Read));
    assert!(!can(&a, "User:u", "h", ResourceType::Topic, "g", Read));
    assert!(!can(
        &a,
        "User:u",
        "h",
        ResourceType::TransactionalId,
        "g",
        Read
    ));
}

#[test]
fn add_is_idempotent_and_remove_undoes_it() {
    let mut a = Authorizer::default();
    let b = topic_allow("p", Prefixed, "User:u", Read);
    assert!(a.add(b.clone()));
    assert!(!a.add(b.clone()));
    assert_eq!(a.len(), 1);
    assert_eq!(a.bindings(), vec![b.clone()]);
    assert!(a.remove(&b));
    assert!(!a.remove(&b));
    assert!(a.is_empty());
    assert!(!topic(&a, "User:u", "px", Read));
}

#[test]
fn prefixes_are_found_among_many_neighbours() {
    let mut a = Authorizer::default();
    // Keys that sort between the name and its real prefixes.
    for name in [
        "f", "fa", "fb", "foo", "foobar", "foobaz", "foz", "gar", "foob",
    ] {
        let pattern = if name == "foob" { Literal } else { Prefixed };
        a.add(topic_allow(name, pattern, &format!("User:{name}"), Read));
    }
    for (who, ok) in [
        ("f", true),
        ("fa", false),
        ("fb", false),
        ("foo", true),
        ("foobar", true),
        ("foobaz", false),
        ("foz", false),
        ("gar", false),
        ("foob", false),
    ] {
        assert_eq!(
            topic(&a, &format!("User:{who}"), "foobar1", Read),
            ok,
            "{who}"
        );
    }
}

#[test]
fn by_resource_type() {
    let mut a = Authorizer::default();
    let any_topic = |a: &Authorizer, who: &str| {
        a.authorize_by_resource_type(who, "h", ResourceType::Topic, Write)
    };
    assert!(!any_topic(&a, "User:u"));
    a.add(topic_allow("t", Literal, "User:u", Write));
    assert!(any_topic(&a, "User:u"));
    assert!(!any_topic(&a, "User:v"));
    // A literal DENY on the same name shadows it; a prefixed one too.
    a.add(acl(
        ResourceType::Topic,
        "t",
        Literal,
        "User:u",
        "*",
        Write,
        AclPermission::Deny,
    ));
    assert!(!any_topic(&a, "User:u"));
    a.add(topic_allow("tx", Prefixed, "User:u", Write));
    assert!(any_topic(&a, "User:u"));
    a.add(acl(
        ResourceType::Topic,
        "t",
        Prefixed,
        "User:u",
        "*",
        Write,
        AclPermission::Deny,
    ));
    assert!(!any_topic(&a, "User:u"));
    // A DENY on the wildcard denies whatever else is allowed.
    a.add(topic_allow("*", Literal, "User:w", Write));
    assert!(any_topic(&a, "User:w"));
    a.add(acl(
        ResourceType::Topic,
        "*",
        Literal,
        "User:w",
        "*",
        All,
        AclPermission::Deny,
    ));
    assert!(!any_topic(&a, "User:w"));
}

#[test]
fn validation_refuses_what_kafka_refuses() {
    let ok = topic_allow("t", Literal, "User:u", Read);
    assert_eq!(ok.validate(), Ok(()));
    let mut bad = ok.clone();
    bad.pattern.name = String::new();
    assert!(bad.validate().is_err());
    let mut bad = ok.clone();
    bad.pattern.pattern_type = PatternType::Match;
    assert!(bad.validate().is_err());
    let mut bad = ok.clone();
    bad.entry.principal = "alice".into();
    assert!(bad.validate().is_err());
    let mut bad = ok.clone();
    bad.entry.operation = Any;
    assert!(bad.validate().is_err());
    let mut bad = ok.clone();
    bad.entry.permission = AclPermission::Any;
    assert!(bad.validate().is_err());
    let mut bad = ok.clone();
    bad.pattern.resource_type = ResourceType::Cluster;
    assert!(bad.validate().is_err());
    bad.pattern.name = CLUSTER_NAME.into();
    assert_eq!(bad.validate(), Ok(()));
}

#[test]
fn filters_match_as_kafka_does() {
    let b = topic_allow("pay", Prefixed, "User:u", Read);
    let w = topic_allow("*", Literal, "User:u", Read);
    let mut f = AclBindingFilter::any();
    assert!(f.matches(&b));
    f.pattern_type = PatternType::Match;
    f.name = Some("payments".into());
    assert!(f.matches(&b) && f.matches(&w));
    f.pattern_type = PatternType::Any;
    assert!(!f.matches(&b));
    f.name = Some("pay".into());
    assert!(f.matches(&b));
    f.pattern_type = Literal;
    assert!(!f.matches(&b));
    let mut f = AclBindingFilter::any();
    f.operation = Write;
    assert!(!f.matches(&b));
    f.operation = Unknown;
    assert!(f.validate().is_err());
}

// --- The reference model: a linear scan that states the rules directly. ---

fn pattern_matches(p: &ResourcePattern, t: ResourceType, name: &str) -> bool {
    p.resource_type == t
        && match p.pattern_type {
            Literal => p.name == name || p.name == "*",
            Prefixed => name.starts_with(&p.name),
            _ => false,
        }
}

fn reference(
    acls: &[AclBinding],
    super_users: &BTreeSet<String>,
    allow_everyone: bool,
    action: &Action<'_>,
) -> bool {
    if super_users.contains(action.principal) {
        return true;
    }
    let on_resource: Vec<&AclBinding> = acls
        .iter()
        .filter(|b| pattern_matches(&b.pattern, action.resource_type, action.name))
        .collect();
    let applies: Vec<&AclBinding> = on_resource
        .iter()
        .copied()
        .filter(|b| b.entry.principal == action.principal || b.entry.principal == "User:*")
        .filter(|b| b.entry.host == "*" || b.entry.host == action.host)
        .collect();
    let op = action.operation;
    let implied = |granted: AclOperation| {
        granted == All
            || granted == op
            || (op == Describe && [Read, Write, Delete, Alter].contains(&granted))
            || (op == DescribeConfigs && granted == AlterConfigs)
    };
    if applies.iter().any(|b| {
        b.entry.permission == AclPermission::Deny
            && (b.entry.operation == All || b.entry.operation == op)
    }) {
        return false;
    }
    if applies
        .iter()
        .any(|b| b.entry.permission == AclPermission::Allow && implied(b.entry.operation))
    {
        return true;
    }
    on_resource.is_empty() && allow_everyone
}

const NAMES: &[&str] = &["", "a", "ab", "abc", "abd", "b", "ba", "*", "é", "éa"];
const PRINCIPALS: &[&str] = &["User:a", "User:b", "User:*"];
const HOSTS: &[&str] = &["*", "1.1.1.1", "2.2.2.2"];
const OPS: &[AclOperation] = &[
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
];
const TYPES: &[ResourceType] = &[
    ResourceType::Topic,
    ResourceType::Group,
    ResourceType::Cluster,
];

fn binding_strategy() -> impl Strategy<Value = AclBinding> {
    (
        0..TYPES.len(),
        1..NAMES.len(),
        any::<bool>(),
        0..PRINCIPALS.len(),
        0..HOSTS.len(),
        0..OPS.len(),
        any::<bool>(),
    )
        .prop_map(|(t, n, prefixed, p, h, o, allow)| {
            acl(
                TYPES[t],
                NAMES[n],
                if prefixed && NAMES[n] != "*" {
                    Prefixed
                } else {
                    Literal
                },
                PRINCIPALS[p],
                HOSTS[h],
                OPS[o],
                if allow {
                    AclPermission::Allow
                } else {
                    AclPermission::Deny
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn authorize_agrees_with_the_linear_model(
        acls in proptest::collection::vec(binding_strategy(), 0..24),
        removed in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        allow_everyone in any::<bool>(),
        super_b in any::<bool>(),
    ) {
        let super_users: BTreeSet<String> =
            if super_b { ["User:b".to_string()].into() } else { BTreeSet::new() };
        let mut authorizer = Authorizer::new(AuthorizerConfig {
            super_users: super_users.clone(),
            allow_everyone_if_no_acl_found: allow_everyone,
        });
        let mut model: Vec<AclBinding> = Vec::new();
        for b in &acls {
            let fresh = !model.contains(b);
            prop_assert_eq!(authorizer.add(b.clone()), fresh);
            if fresh {
                model.push(b.clone());
            }
        }
        for index in &removed {
            if model.is_empty() { break; }
            let b = model.remove(index.index(model.len()));
            prop_assert!(authorizer.remove(&b));
        }
        prop_assert_eq!(authorizer.len(), model.len());
        for &t in TYPES {
            for name in &NAMES[1..] {
                for principal in ["User:a", "User:b", "User:c"] {
                    for host in ["1.1.1.1", "2.2.2.2"] {
                        for &operation in &OPS[1..] {
                            let action = Action { principal, host, resource_type: t, name, operation };
                            prop_assert_eq!(
                                authorizer.authorize(&action),
                                reference(&model, &super_users, allow_everyone, &action),
                                "{:?}", action
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn filters_select_what_they_match(
        acls in proptest::collection::vec(binding_strategy(), 0..16),
        n in 1..NAMES.len(),
    ) {
        let mut authorizer = Authorizer::default();
        for b in &acls { authorizer.add(b.clone()); }
        let filter = AclBindingFilter {
            name: Some(NAMES[n].to_string()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        let mut expected: Vec<AclBinding> = acls
            .iter()
            .filter(|b| pattern_matches(&b.pattern, b.pattern.resource_type, NAMES[n]))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut got = authorizer.matching(&filter);
        expected.sort();
        got.sort();
        prop_assert_eq!(got, expected);
    }
}

/// The cost of one check among 10 000 ACLs: `cargo test -p shoal-core --release acl_check_cost
/// -- --ignored --nocapture`. A harness, not a timed test: it prints and asserts nothing
/// about time.
#[test]
#[ignore]
fn acl_check_cost() {
    for prefixed_share in [0, 4] {
        let mut a = Authorizer::default();
        for i in 0..10_000usize {
            let (t, pattern) = match i % 4 {
                2 if prefixed_share > 0 => (ResourceType::Topic, Prefixed),
                0..=2 => (ResourceType::Topic, Literal),
                _ => (ResourceType::Group, Literal),
            };
            let name = format!("team{:03}.service{:02}.events", i % 997, i % 31);
            let principal = format!("User:user{}", i % 100);
            a.add(acl(
                t,
                &name,
                pattern,
                &principal,
                "*",
                Write,
                AclPermission::Allow,
            ));
        }
        a.add(topic_allow("team", Prefixed, "User:reader", Read));
        let names: Vec<String> = (0..1000)
            .map(|i| format!("team{:03}.service{:02}.events", i % 997, i % 31))
            .collect();
        for (principal, op) in [
            ("User:user6", Write),
            ("User:reader", Read),
            ("User:nobody", Write),
        ] {
            let rounds = 1_000_000;
            let start = std::time::Instant::now();
            let mut allowed = 0u64;
            for i in 0..rounds {
                allowed += u64::from(topic(&a, principal, &names[i % names.len()], op));
            }
            let elapsed = start.elapsed();
            println!(
                "{} ACLs ({}prefixed), {principal} {op:?}: {:.0} ns per check ({allowed} of {rounds} allowed)",
                a.len(),
                if prefixed_share > 0 { "1 in 4 " } else { "1 " },
                elapsed.as_nanos() as f64 / rounds as f64
            );
        }
    }
}
