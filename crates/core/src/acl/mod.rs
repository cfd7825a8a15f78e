//! Access control lists with the semantics of Kafka's `StandardAuthorizer`.
//!
//! An ACL ([`AclBinding`]) names a resource pattern (a type, a name, LITERAL or PREFIXED) and an
//! entry (a principal, a host, an operation, ALLOW or DENY). [`Authorizer::authorize`] decides
//! one action the way Kafka does:
//!
//! 1. a super user (`super.users`) is allowed everything;
//! 2. the ACLs that apply are those whose pattern matches the resource (the LITERAL name, the
//!    LITERAL wildcard `*`, or a PREFIXED pattern the name starts with), whose principal is the
//!    caller's or `User:*`, and whose host is the caller's address or `*`;
//! 3. a matching DENY for the operation (or ALL) wins over any ALLOW. An ALLOW for READ, WRITE,
//!    DELETE or ALTER also allows DESCRIBE, and ALTER_CONFIGS allows DESCRIBE_CONFIGS; the
//!    implication is for ALLOW only (a DENY READ leaves DESCRIBE alone);
//! 4. with no ALLOW the action is denied, unless the resource has no ACL at all (for anyone)
//!    and `allow.everyone.if.no.acl.found` is set.
//!
//! The ACLs are indexed by resource type and name: a check looks up the literal name and `*`
//! in a hash map, and the name's prefixes of each length some PREFIXED pattern has in another,
//! so its cost does not grow with the number of ACLs on other resources.
//!
//! Sans-IO like the rest of this crate: the broker persists the bindings (metadata records) and
//! replays them into [`Authorizer::add`] / [`Authorizer::remove`].

mod authorizer;
mod filter;
#[cfg(test)]
mod tests;

pub use authorizer::{Authorizer, AuthorizerConfig};
pub use filter::{AclBindingFilter, FilterError};

/// Kafka's `ResourceType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Unknown = 0,
    Any = 1,
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
    DelegationToken = 6,
    User = 7,
}

impl ResourceType {
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::Any,
            2 => Self::Topic,
            3 => Self::Group,
            4 => Self::Cluster,
            5 => Self::TransactionalId,
            6 => Self::DelegationToken,
            7 => Self::User,
            _ => Self::Unknown,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }
}

/// Kafka's `PatternType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    Unknown = 0,
    /// Filters only: any pattern type.
    Any = 1,
    /// Filters only: the patterns that would apply to the filter's name.
    Match = 2,
    Literal = 3,
    Prefixed = 4,
}

impl PatternType {
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::Any,
            2 => Self::Match,
            3 => Self::Literal,
            4 => Self::Prefixed,
            _ => Self::Unknown,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }
}

/// Kafka's `AclOperation` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclOperation {
    Unknown = 0,
    /// Filters only.
    Any = 1,
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
    TwoPhaseCommit = 15,
}

impl AclOperation {
    pub fn from_code(code: i8) -> Self {
        use AclOperation::*;
        match code {
            1 => Any,
            2 => All,
            3 => Read,
            4 => Write,
            5 => Create,
            6 => Delete,
            7 => Alter,
            8 => Describe,
            9 => ClusterAction,
            10 => DescribeConfigs,
            11 => AlterConfigs,
            12 => IdempotentWrite,
            13 => CreateTokens,
            14 => DescribeTokens,
            15 => TwoPhaseCommit,
            _ => Unknown,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }

    /// Whether an ALLOW ACL for `self` allows `requested` (ALL, the operation itself, or the
    /// DESCRIBE / DESCRIBE_CONFIGS it implies).
    pub fn allow_covers(self, requested: AclOperation) -> bool {
        use AclOperation::*;
        match (self, requested) {
            (All, _) => true,
            (Describe | Read | Write | Delete | Alter, Describe) => true,
            (DescribeConfigs | AlterConfigs, DescribeConfigs) => true,
            (granted, requested) => granted == requested,
        }
    }

    /// Whether a DENY ACL for `self` denies `requested`: ALL or the operation itself, never an
    /// implied one.
    pub fn deny_covers(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }
}

/// Kafka's `AclPermissionType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclPermission {
    Unknown = 0,
    /// Filters only.
    Any = 1,
    Deny = 2,
    Allow = 3,
}

impl AclPermission {
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => Self::Any,
            2 => Self::Deny,
            3 => Self::Allow,
            _ => Self::Unknown,
        }
    }

    pub fn code(self) -> i8 {
        self as i8
    }
}

/// The resource name matching every resource of a type (as a LITERAL pattern).
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal matching every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host matching every address.
pub const WILDCARD_HOST: &str = "*";
/// The one name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// A resource pattern: what an ACL applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

/// Who may (or may not) do what from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccessControlEntry {
    /// `Type:name`, as Kafka writes principals (`User:alice`, `User:*`).
    pub principal: String,
    /// An IP address as the broker sees the client's, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

/// Why CreateAcls refuses a binding (Kafka answers each with INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl AclBinding {
    /// Checks a binding CreateAcls was asked to add, as Kafka's controller does.
    ///
    /// # Errors
    /// [`InvalidAcl`] with Kafka's message.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        let invalid = |m: String| Err(InvalidAcl(m));
        let p = &self.pattern;
        let e = &self.entry;
        if matches!(p.resource_type, ResourceType::Unknown | ResourceType::Any) {
            return invalid(format!("Invalid resourceType {:?}", p.resource_type));
        }
        if !matches!(p.pattern_type, PatternType::Literal | PatternType::Prefixed) {
            return invalid(format!("Invalid patternType {:?}", p.pattern_type));
        }
        if matches!(e.operation, AclOperation::Unknown | AclOperation::Any) {
            return invalid(format!("Invalid operation {:?}", e.operation));
        }
        if matches!(e.permission, AclPermission::Unknown | AclPermission::Any) {
            return invalid(format!("Invalid permissionType {:?}", e.permission));
        }
        if p.name.is_empty() {
            return invalid("Invalid empty resource name specified".into());
        }
        if p.resource_type == ResourceType::Cluster && p.name != CLUSTER_NAME {
            return invalid("The only valid name for the CLUSTER resource is kafka-cluster".into());
        }
        match e.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return invalid(format!(
                    "Could not parse principal from `{}` (no colon is present separating the \
                     principal type from the principal name)",
                    e.principal
                ))
            }
        }
        if e.host.is_empty() {
            return invalid("Invalid empty host specified".into());
        }
        Ok(())
    }
}

/// One action to decide: `principal` at `host` wants `operation` on `resource_type` `name`.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    pub principal: &'a str,
    pub host: &'a str,
    pub resource_type: ResourceType,
    pub name: &'a str,
    pub operation: AclOperation,
}
