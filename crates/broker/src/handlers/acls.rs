//! CreateAcls, DescribeAcls and DeleteAcls, as Kafka's controller answers them. Each valid
//! creation or deletion becomes a metadata record appended (fsynced) before the answer; an
//! invalid creation is INVALID_REQUEST with Kafka's message, a filter with an UNKNOWN element
//! too. Authorization (ALTER or DESCRIBE on the cluster) is checked before these run
//! (`crate::authorization`).

use std::collections::BTreeMap;

use shoal_core::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType,
    ResourcePattern, ResourceType,
};
use shoal_protocol::messages::create_acls_response::AclCreationResult;
use shoal_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use shoal_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use shoal_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use shoal_protocol::{ErrorCode, StrBytes};

use super::str_bytes;
use crate::cluster_metadata::MetaRecord;
use crate::node::NodeState;

/// Most ACLs one CreateAcls may add (a limit on everything; Kafka's controller takes
/// 10 000 records per batch).
pub const CREATIONS_PER_REQUEST_MAX: usize = 10_000;

fn filter_of(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern_type: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission: i8,
) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: ResourceType::from_code(resource_type),
        name: name.as_ref().map(|s| s.to_string()),
        pattern_type: PatternType::from_code(pattern_type),
        principal: principal.as_ref().map(|s| s.to_string()),
        host: host.as_ref().map(|s| s.to_string()),
        operation: AclOperation::from_code(operation),
        permission: AclPermission::from_code(permission),
    }
}

/// Adds every valid creation; answers one result per creation, in order.
pub async fn create(node: &NodeState, request: &CreateAclsRequest) -> CreateAclsResponse {
    let too_many = request.creations.len() > CREATIONS_PER_REQUEST_MAX;
    let mut outcomes: Vec<Result<AclBinding, String>> = request
        .creations
        .iter()
        .map(|c| {
            if too_many {
                return Err(format!(
                    "At most {CREATIONS_PER_REQUEST_MAX} ACLs may be created in one request"
                ));
            }
            let binding = AclBinding {
                pattern: ResourcePattern {
                    resource_type: ResourceType::from_code(c.resource_type),
                    name: c.resource_name.to_string(),
                    pattern_type: PatternType::from_code(c.resource_pattern_type),
                },
                entry: AccessControlEntry {
                    principal: c.principal.to_string(),
                    host: c.host.to_string(),
                    operation: AclOperation::from_code(c.operation),
                    permission: AclPermission::from_code(c.permission_type),
                },
            };
            binding.validate().map(|()| binding).map_err(|e| e.0)
        })
        .collect();
    let records: Vec<MetaRecord> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().cloned().map(MetaRecord::Acl))
        .collect();
    if let Err(e) = node.alter_acls(records).await {
        for o in outcomes.iter_mut().filter(|o| o.is_ok()) {
            *o = Err(e.message.clone());
        }
        let results = outcomes
            .into_iter()
            .map(|o| match o {
                Ok(_) => AclCreationResult::default(),
                Err(m) => AclCreationResult::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(m))),
            })
            .collect();
        return CreateAclsResponse::default().with_results(results);
    }
    let results = outcomes
        .into_iter()
        .map(|o| match o {
            Ok(_) => AclCreationResult::default(),
            Err(message) => AclCreationResult::default()
                .with_error_code(ErrorCode::INVALID_REQUEST.code())
                .with_error_message(Some(str_bytes(message))),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// The ACLs matching the filter, grouped by resource pattern.
pub fn describe(node: &NodeState, request: &DescribeAclsRequest) -> DescribeAclsResponse {
    let filter = filter_of(
        request.resource_type_filter,
        &request.resource_name_filter,
        request.pattern_type_filter,
        &request.principal_filter,
        &request.host_filter,
        request.operation,
        request.permission_type,
    );
    if let Err(e) = filter.validate() {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::INVALID_REQUEST.code())
            .with_error_message(Some(str_bytes(e.0)));
    }
    let matching = node.acls().matching(&filter);
    let mut by_pattern: BTreeMap<ResourcePattern, Vec<AclDescription>> = BTreeMap::new();
    for b in matching {
        by_pattern.entry(b.pattern).or_default().push(
            AclDescription::default()
                .with_principal(str_bytes(b.entry.principal))
                .with_host(str_bytes(b.entry.host))
                .with_operation(b.entry.operation.code())
                .with_permission_type(b.entry.permission.code()),
        );
    }
    let resources = by_pattern
        .into_iter()
        .map(|(p, acls)| {
            DescribeAclsResource::default()
                .with_resource_type(p.resource_type.code())
                .with_resource_name(str_bytes(p.name))
                .with_pattern_type(p.pattern_type.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

/// Deletes what each filter matches; answers each filter with the ACLs it deleted.
pub async fn delete(node: &NodeState, request: &DeleteAclsRequest) -> DeleteAclsResponse {
    let mut results = Vec::with_capacity(request.filters.len());
    for f in &request.filters {
        let filter = filter_of(
            f.resource_type_filter,
            &f.resource_name_filter,
            f.pattern_type_filter,
            &f.principal_filter,
            &f.host_filter,
            f.operation,
            f.permission_type,
        );
        if let Err(e) = filter.validate() {
            results.push(
                DeleteAclsFilterResult::default()
                    .with_error_code(ErrorCode::INVALID_REQUEST.code())
                    .with_error_message(Some(str_bytes(e.0))),
            );
            continue;
        }
        let matching = node.acls().matching(&filter);
        let records = matching
            .iter()
            .cloned()
            .map(MetaRecord::RemoveAcl)
            .collect();
        if let Err(e) = node.alter_acls(records).await {
            results.push(
                DeleteAclsFilterResult::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            );
            continue;
        }
        let acls = matching
            .into_iter()
            .map(|b| {
                DeleteAclsMatchingAcl::default()
                    .with_resource_type(b.pattern.resource_type.code())
                    .with_resource_name(str_bytes(b.pattern.name))
                    .with_pattern_type(b.pattern.pattern_type.code())
                    .with_principal(str_bytes(b.entry.principal))
                    .with_host(str_bytes(b.entry.host))
                    .with_operation(b.entry.operation.code())
                    .with_permission_type(b.entry.permission.code())
            })
            .collect();
        results.push(DeleteAclsFilterResult::default().with_matching_acls(acls));
    }
    DeleteAclsResponse::default().with_filter_results(results)
}

/// CreateAcls, DescribeAcls and DeleteAcls without an authorizer: SECURITY_DISABLED, as Kafka
/// answers them.
pub fn security_disabled(request: &shoal_protocol::Request) -> shoal_protocol::Response {
    use shoal_protocol::Request;
    let e = ErrorCode::SECURITY_DISABLED.code();
    let message = || Some(str_bytes("No Authorizer is configured."));
    match request {
        Request::CreateAcls(r) => CreateAclsResponse::default()
            .with_results(
                r.creations
                    .iter()
                    .map(|_| {
                        AclCreationResult::default()
                            .with_error_code(e)
                            .with_error_message(message())
                    })
                    .collect(),
            )
            .into(),
        Request::DeleteAcls(r) => DeleteAclsResponse::default()
            .with_filter_results(
                r.filters
                    .iter()
                    .map(|_| {
                        DeleteAclsFilterResult::default()
                            .with_error_code(e)
                            .with_error_message(message())
                    })
                    .collect(),
            )
            .into(),
        _ => DescribeAclsResponse::default()
            .with_error_code(e)
            .with_error_message(message())
            .into(),
    }
}
