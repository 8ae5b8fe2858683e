pub mod bar;
pub mod chart;
pub mod field;
pub mod node_card;
pub mod options;
pub mod timeline;
pub mod vm_actions;
pub mod vm_table;
