//! `[[auth.rules]]` in the router: a request for an item kept from the caller is
//! answered as for an unknown item, and lists leave such items out.

use crate::jsonrpc::Raw;
use crate::jsonrpc::{code, to_raw, Request, RpcError};
use serde_json::{json, Value};

/// The error for a request that uses an item `[[auth.rules]]` keep from the caller:
/// the one an unknown item gets.
pub(super) fn hidden(access: &crate::auth::policy::Access, req: &Request) -> Option<RpcError> {
    use crate::auth::policy::{item_of, Decision, Item};
    let (item, name) = item_of(&req.method, req.params.as_ref())?;
    if access.decide(item, &name) == Decision::Allow {
        return None;
    }
    Some(match item {
        Item::Tool => RpcError::new(code::INVALID_PARAMS, format!("unknown tool: {name}")),
        Item::Prompt => RpcError::new(code::INVALID_PARAMS, format!("unknown prompt: {name}")),
        Item::Resource => RpcError::new(code::RESOURCE_NOT_FOUND, "Resource not found")
            .with_data(json!({ "uri": name })),
    })
}

/// A list result without the items the caller may not use as it is.
pub(super) fn visible_only(access: &crate::auth::policy::Access, method: &str, result: Raw) -> Raw {
    use crate::auth::policy::Item;
    let (item, field, key) = match method {
        "tools/list" => (Item::Tool, "tools", "name"),
        "prompts/list" => (Item::Prompt, "prompts", "name"),
        "resources/list" => (Item::Resource, "resources", "uri"),
        _ => return result,
    };
    let Ok(mut v) = serde_json::from_str::<Value>(result.get()) else {
        return result;
    };
    if let Some(list) = v.get_mut(field).and_then(Value::as_array_mut) {
        list.retain(|x| {
            x.get(key)
                .and_then(Value::as_str)
                .is_some_and(|n| access.visible(item, n))
        });
    }
    to_raw(&v)
}
