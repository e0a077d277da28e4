//! A request's params decoded and its answer encoded, the same way for every method.

use serde_json::Value;

use crate::protocol::{encode_response, json_kind, Empty, ErrorObject, Method, RequestId};

/// Decodes params (absent or null counts as `{}`), else -32602 with the decoder's message.
pub(super) fn decode<M: Method>(params: Value) -> Result<M::Params, ErrorObject> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Object(_) => params,
        other => {
            return Err(ErrorObject::invalid_params(format!(
                "invalid params for {}: expected an object, got {}",
                M::NAME,
                json_kind(&other)
            )))
        }
    };
    serde_json::from_value(params)
        .map_err(|e| ErrorObject::invalid_params(format!("invalid params for {}: {e}", M::NAME)))
}

/// An encoded error response.
pub(super) fn error_reply(id: &RequestId, error: ErrorObject) -> String {
    encode_response::<Empty>(id, &Err(error))
}

/// The encoded response of method `M`.
pub(super) fn reply<M: Method>(id: &RequestId, result: Result<M::Result, ErrorObject>) -> String {
    encode_response(id, &result)
}

/// Decodes, handles and encodes one call of method `M`.
pub(super) fn call<M: Method>(
    id: &RequestId,
    params: Value,
    handler: impl FnOnce(M::Params) -> Result<M::Result, ErrorObject>,
) -> String {
    reply::<M>(id, decode::<M>(params).and_then(handler))
}
