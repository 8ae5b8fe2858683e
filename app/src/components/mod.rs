pub mod bar;
pub mod node_card;
pub mod vm_table;
