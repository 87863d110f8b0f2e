//! Schema fragments that schemars cannot derive on its own.

use schemars::{json_schema, Schema, SchemaGenerator};

/// A free-form JSON object kept verbatim by the API server (backend
/// `config`, saved original config): `type: object` with
/// `x-kubernetes-preserve-unknown-fields`.
pub(crate) fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Drops the type-level description of an enum.
///
/// kube hoists the schema of an `Option<Enum>` out of its `anyOf` wrapper,
/// which would replace the field's own description with the enum type's;
/// without a type-level description the field's documentation survives.
pub(crate) fn without_description(schema: &mut Schema) {
    schema.remove("description");
}
