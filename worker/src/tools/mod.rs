//! The read-only repository tools (SPEC E1). Temporary interface stub: the repository work
//! replaces this file with the real implementation.

use verdict_proto::wire::Tool;

use crate::provider::ToolDefinition;
use crate::repo::Snapshot;

#[derive(Debug, Clone, Default)]
pub struct ToolLimits {
    pub max_output_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    pub truncated: bool,
}

#[derive(Debug)]
pub struct ToolBox {
    allowed: Vec<Tool>,
}

impl ToolBox {
    pub fn new(_snapshot: Snapshot, allowed: &[Tool], _limits: ToolLimits) -> ToolBox {
        ToolBox {
            allowed: allowed.to_vec(),
        }
    }

    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.allowed
            .iter()
            .map(|t| ToolDefinition {
                name: t.as_str().to_owned(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            })
            .collect()
    }

    pub async fn call(&self, name: &str, _arguments: &str) -> ToolOutput {
        ToolOutput {
            content: format!("stub {name}"),
            is_error: false,
            truncated: false,
        }
    }
}
