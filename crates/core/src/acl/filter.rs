//! ACL filters, as DescribeAcls and DeleteAcls carry them (Kafka's `AclBindingFilter`).

use super::{
    AclBinding, AclOperation, AclPermission, PatternType, ResourceType, WILDCARD_RESOURCE,
};

/// A filter: `None` and the ANY codes match everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

/// Why a filter is refused (INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

impl AclBindingFilter {
    /// The filter matching every ACL.
    pub fn any() -> Self {
        Self {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: AclPermission::Any,
        }
    }

    /// Refuses a filter with an UNKNOWN element, as Kafka does.
    ///
    /// # Errors
    /// [`FilterError`] naming the first unknown element.
    pub fn validate(&self) -> Result<(), FilterError> {
        let unknown = if self.resource_type == ResourceType::Unknown {
            Some("resource type")
        } else if self.pattern_type == PatternType::Unknown {
            Some("pattern type")
        } else if self.operation == AclOperation::Unknown {
            Some("operation")
        } else if self.permission == AclPermission::Unknown {
            Some("permission type")
        } else {
            None
        };
        match unknown {
            Some(what) => Err(FilterError(format!(
                "The filter contains an UNKNOWN {what}"
            ))),
            None => Ok(()),
        }
    }

    /// Whether `binding` passes the filter.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let p = &binding.pattern;
        let e = &binding.entry;
        if self.resource_type != ResourceType::Any && self.resource_type != p.resource_type {
            return false;
        }
        let name_ok = match (self.pattern_type, &self.name) {
            (PatternType::Match, Some(name)) => match p.pattern_type {
                PatternType::Literal => p.name == *name || p.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(p.name.as_str()),
                _ => false,
            },
            (PatternType::Any | PatternType::Match, None) => true,
            (PatternType::Any, Some(name)) => p.name == *name,
            (exact, name) => exact == p.pattern_type && name.as_ref().is_none_or(|n| *n == p.name),
        };
        name_ok
            && self.principal.as_ref().is_none_or(|x| *x == e.principal)
            && self.host.as_ref().is_none_or(|x| *x == e.host)
            && (self.operation == AclOperation::Any || self.operation == e.operation)
            && (self.permission == AclPermission::Any || self.permission == e.permission)
    }
}
