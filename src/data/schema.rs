//! Field names and types of a stream, known before anything runs.

use std::sync::Arc;

/// The type of a field. Timestamps are `Int` epoch milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DataType {
    Bool,
    Int,
    Float,
    Str,
}

impl DataType {
    /// The name users write in configs and see in errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DataType::Bool => "bool",
            DataType::Int => "int",
            DataType::Float => "float",
            DataType::Str => "string",
        }
    }

    pub(crate) fn is_numeric(self) -> bool {
        matches!(self, DataType::Int | DataType::Float)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) ty: DataType,
}

impl Field {
    pub(crate) fn new(name: impl Into<String>, ty: DataType) -> Self {
        Field {
            name: name.into(),
            ty,
        }
    }
}

/// The ordered fields of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Schema {
    fields: Vec<Field>,
}

pub(crate) type SchemaRef = Arc<Schema>;

impl Schema {
    pub(crate) fn new(fields: Vec<Field>) -> Self {
        Schema { fields }
    }

    pub(crate) fn fields(&self) -> &[Field] {
        &self.fields
    }

    pub(crate) fn len(&self) -> usize {
        self.fields.len()
    }

    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    pub(crate) fn field(&self, name: &str) -> Option<(usize, &Field)> {
        self.fields.iter().enumerate().find(|(_, f)| f.name == name)
    }

    /// `name: type, ...`, for error messages that list what is available.
    pub(crate) fn describe(&self) -> String {
        let parts: Vec<String> = self
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, f.ty))
            .collect();
        parts.join(", ")
    }
}
