//! Merges modules that wasm-split cut out of one program (its chunks and
//! split modules) into one module, so that a page fetches one file where it
//! fetched dozens.
//!
//! The parts share everything through their imports: the main module's
//! memory, its indirect function table and its stack pointer. They export
//! nothing and have no start function; instantiating one only writes its
//! functions into table slots that are its own and its data at addresses
//! that are its own. So the merged module imports each of those once, and
//! takes every part's types, functions, element and data segments, renumbered.
//!
//! A part calls a function of another part through the table (`i32.const
//! slot; call_indirect`). When the slot's function is in the same merged
//! module, the call becomes a direct `call`: nothing else ever writes that
//! slot, and wasm-opt can then inline and drop what the indirection hid.

use std::collections::HashMap;
use std::fmt;

use wasm_encoder::reencode::{self, Reencode};
use wasmparser::{
    CompositeInnerType, ElementItems, ElementKind, FuncType, Operator, Parser, Payload, TypeRef,
    Validator, WasmFeatures,
};

/// A module to merge: its name (for messages) and its bytes.
pub struct Part<'a> {
    pub name: &'a str,
    pub wasm: &'a [u8],
}

pub struct Merged {
    pub wasm: Vec<u8>,
    /// Indirect calls that became direct ones.
    pub direct_calls: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{part}: {source}")]
    Read {
        part: String,
        source: wasmparser::BinaryReaderError,
    },
    #[error("{part}: {what}, which a module wasm-split made does not have")]
    Unexpected { part: String, what: String },
    #[error("{part}: imports {module}.{name} as another type than an earlier part")]
    ImportMismatch {
        part: String,
        module: String,
        name: String,
    },
    #[error("{part}: re-encoding: {detail}")]
    Reencode { part: String, detail: String },
    #[error("the merged module is not valid: {0}")]
    Invalid(wasmparser::BinaryReaderError),
}

/// One import of the merged module, and the type every part agreed on.
struct Import {
    module: String,
    name: String,
    ty: TypeRef,
}

/// What the first reading of a part finds.
#[derive(Default)]
struct Scan {
    types: Vec<FuncType>,
    /// Index in the merged module's imports, per import of the part.
    imports: Vec<usize>,
    /// The part's own functions' type indices.
    functions: Vec<u32>,
    elements: u32,
    data: u32,
    data_count: bool,
}

/// Merges `parts`, in order, into one valid module. Custom sections (names,
/// producers) are left out: one part alone comes out stripped of them.
pub fn merge(parts: &[Part<'_>]) -> Result<Merged, MergeError> {
    let mut imports: Vec<Import> = Vec::new();
    let mut scans = Vec::with_capacity(parts.len());
    for part in parts {
        scans.push(scan(part, &mut imports)?);
    }
    let layout = Layout::new(&imports, &scans);
    let slots = slots(parts, &scans, &layout)?;

    let mut types = wasm_encoder::TypeSection::new();
    let mut import_section = wasm_encoder::ImportSection::new();
    let mut functions = wasm_encoder::FunctionSection::new();
    let mut elements = wasm_encoder::ElementSection::new();
    let mut code = wasm_encoder::CodeSection::new();
    let mut data = wasm_encoder::DataSection::new();

    for import in &imports {
        let ty =
            wasm_encoder::EntityType::try_from(import.ty).map_err(|e| MergeError::Reencode {
                part: format!("the import {}.{}", import.module, import.name),
                detail: e.to_string(),
            })?;
        import_section.import(&import.module, &import.name, ty);
    }
    let mut direct_calls = 0;
    for (index, (part, scan)) in parts.iter().zip(&scans).enumerate() {
        let mut remap = Remap::new(index, scan, &layout);
        let failed = |e| reencode_error(part.name, e);
        for ty in &scan.types {
            let ty = remap.func_type(ty.clone()).map_err(failed)?;
            types.ty().func_type(&ty);
        }
        for ty in &scan.functions {
            functions.function(remap.type_index(*ty).map_err(failed)?);
        }
        for payload in Parser::new(0).parse_all(part.wasm) {
            match payload.map_err(read_error(part.name))? {
                Payload::ElementSection(reader) => {
                    for element in reader {
                        let element = element.map_err(read_error(part.name))?;
                        remap
                            .parse_element(&mut elements, element)
                            .map_err(failed)?;
                    }
                }
                Payload::DataSection(reader) => {
                    for datum in reader {
                        let datum = datum.map_err(read_error(part.name))?;
                        remap.parse_data(&mut data, datum).map_err(failed)?;
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    direct_calls += function(&mut remap, &mut code, &body, &slots, scan, &layout)
                        .map_err(|e| match e {
                        BodyError::Read(source) => MergeError::Read {
                            part: part.name.to_string(),
                            source,
                        },
                        BodyError::Reencode(e) => failed(e),
                    })?;
                }
                _ => {}
            }
        }
    }

    let mut module = wasm_encoder::Module::new();
    module.section(&types);
    module.section(&import_section);
    module.section(&functions);
    if !elements.is_empty() {
        module.section(&elements);
    }
    if scans.iter().any(|s| s.data_count) {
        module.section(&wasm_encoder::DataCountSection {
            count: layout.data_total,
        });
    }
    module.section(&code);
    if !data.is_empty() {
        module.section(&data);
    }
    let wasm = module.finish();
    Validator::new_with_features(WasmFeatures::default())
        .validate_all(&wasm)
        .map_err(MergeError::Invalid)?;
    Ok(Merged { wasm, direct_calls })
}

fn read_error(part: &str) -> impl Fn(wasmparser::BinaryReaderError) -> MergeError + '_ {
    move |source| MergeError::Read {
        part: part.to_string(),
        source,
    }
}

fn reencode_error(part: &str, e: reencode::Error<Missing>) -> MergeError {
    let detail = match e {
        reencode::Error::ParseError(e) => e.to_string(),
        other => other.to_string(),
    };
    MergeError::Reencode {
        part: part.to_string(),
        detail,
    }
}

/// Validates `part`, notes what it holds and adds its imports to `imports`.
fn scan(part: &Part<'_>, imports: &mut Vec<Import>) -> Result<Scan, MergeError> {
    let unexpected = |what: &str| MergeError::Unexpected {
        part: part.name.to_string(),
        what: what.to_string(),
    };
    Validator::new_with_features(WasmFeatures::default())
        .validate_all(part.wasm)
        .map_err(read_error(part.name))?;
    let mut scan = Scan::default();
    for payload in Parser::new(0).parse_all(part.wasm) {
        match payload.map_err(read_error(part.name))? {
            Payload::Version { .. }
            | Payload::CustomSection(_)
            | Payload::CodeSectionStart { .. }
            | Payload::CodeSectionEntry(_)
            | Payload::End(_) => {}
            Payload::TypeSection(reader) => {
                for group in reader {
                    let group = group.map_err(read_error(part.name))?;
                    if group.is_explicit_rec_group() {
                        return Err(unexpected("a recursive type group"));
                    }
                    for sub in group.types() {
                        match &sub.composite_type.inner {
                            CompositeInnerType::Func(ty) => scan.types.push(ty.clone()),
                            _ => return Err(unexpected("a type that is not a function's")),
                        }
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(read_error(part.name))?;
                    scan.imports.push(unify(part.name, imports, &import)?);
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader {
                    scan.functions.push(ty.map_err(read_error(part.name))?);
                }
            }
            Payload::ElementSection(reader) => scan.elements = reader.count(),
            Payload::DataSection(reader) => scan.data = reader.count(),
            Payload::DataCountSection { .. } => scan.data_count = true,
            Payload::ExportSection(reader) if reader.count() == 0 => {}
            Payload::ExportSection(_) => return Err(unexpected("exports")),
            Payload::StartSection { .. } => return Err(unexpected("a start function")),
            Payload::TableSection(_) | Payload::MemorySection(_) | Payload::GlobalSection(_) => {
                return Err(unexpected("a table, memory or global of its own"));
            }
            _ => return Err(unexpected("a section of another kind")),
        }
    }
    Ok(scan)
}

/// The merged module's index of `import`, added if no part imported it
/// before. Parts that import the same memory or table may ask for different
/// minimums: the merged import asks for the largest (and the smallest
/// maximum), which the main module's memory and table satisfy since they
/// satisfy every part.
fn unify(
    part: &str,
    imports: &mut Vec<Import>,
    import: &wasmparser::Import<'_>,
) -> Result<usize, MergeError> {
    if !matches!(
        import.ty,
        TypeRef::Memory(_) | TypeRef::Table(_) | TypeRef::Global(_)
    ) {
        return Err(MergeError::Unexpected {
            part: part.to_string(),
            what: format!(
                "an import of a function or tag ({}.{})",
                import.module, import.name
            ),
        });
    }
    let mismatch = || MergeError::ImportMismatch {
        part: part.to_string(),
        module: import.module.to_string(),
        name: import.name.to_string(),
    };
    let Some(index) = imports
        .iter()
        .position(|i| i.module == import.module && i.name == import.name)
    else {
        imports.push(Import {
            module: import.module.to_string(),
            name: import.name.to_string(),
            ty: import.ty,
        });
        return Ok(imports.len() - 1);
    };
    let known = &mut imports[index];
    known.ty = match (known.ty, import.ty) {
        (TypeRef::Memory(a), TypeRef::Memory(b))
            if (a.memory64, a.shared, a.page_size_log2)
                == (b.memory64, b.shared, b.page_size_log2) =>
        {
            TypeRef::Memory(wasmparser::MemoryType {
                initial: a.initial.max(b.initial),
                maximum: smaller(a.maximum, b.maximum),
                ..a
            })
        }
        (TypeRef::Table(a), TypeRef::Table(b))
            if (a.element_type, a.table64, a.shared) == (b.element_type, b.table64, b.shared) =>
        {
            TypeRef::Table(wasmparser::TableType {
                initial: a.initial.max(b.initial),
                maximum: smaller(a.maximum, b.maximum),
                ..a
            })
        }
        (TypeRef::Global(a), TypeRef::Global(b)) if a == b => TypeRef::Global(a),
        _ => return Err(mismatch()),
    };
    Ok(index)
}

fn smaller(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Where each part's items go in the merged module's index spaces.
struct Layout {
    /// Per import of the merged module: its type, and its index among the
    /// imports of its kind.
    import_types: Vec<TypeRef>,
    import_index: Vec<u32>,
    /// Per part: the merged index of its first type, function, element
    /// and data segment.
    first_type: Vec<u32>,
    first_function: Vec<u32>,
    first_element: Vec<u32>,
    first_data: Vec<u32>,
    data_total: u32,
    /// The type of every function of the merged module.
    function_types: Vec<FuncType>,
}

impl Layout {
    fn new(imports: &[Import], scans: &[Scan]) -> Layout {
        let (mut tables, mut memories, mut globals) = (0, 0, 0);
        let import_index = imports
            .iter()
            .map(|import| {
                let count = match import.ty {
                    TypeRef::Table(_) => &mut tables,
                    TypeRef::Memory(_) => &mut memories,
                    // `unify` lets nothing else through.
                    _ => &mut globals,
                };
                *count += 1;
                *count - 1
            })
            .collect();
        let mut layout = Layout {
            import_types: imports.iter().map(|i| i.ty).collect(),
            import_index,
            first_type: Vec::new(),
            first_function: Vec::new(),
            first_element: Vec::new(),
            first_data: Vec::new(),
            data_total: 0,
            function_types: Vec::new(),
        };
        let (mut types, mut functions, mut elements, mut data) = (0, 0, 0, 0);
        for scan in scans {
            layout.first_type.push(types);
            layout.first_function.push(functions);
            layout.first_element.push(elements);
            layout.first_data.push(data);
            types += len(&scan.types);
            functions += len(&scan.functions);
            elements += scan.elements;
            data += scan.data;
            for ty in &scan.functions {
                if let Some(ty) = scan.types.get(*ty as usize) {
                    layout.function_types.push(ty.clone());
                }
            }
        }
        layout.data_total = data;
        layout
    }

    fn function_type(&self, function: u32) -> Option<&FuncType> {
        self.function_types.get(function as usize)
    }
}

fn len<T>(items: &[T]) -> u32 {
    u32::try_from(items.len()).unwrap_or(u32::MAX)
}

/// The table slots the parts' active element segments fill, with the merged
/// index of the function each one gets: (table, slot) → function. A slot
/// two segments fill is left out (wasm-split never does that).
fn slots(
    parts: &[Part<'_>],
    scans: &[Scan],
    layout: &Layout,
) -> Result<HashMap<(u32, u32), u32>, MergeError> {
    let mut slots = HashMap::new();
    let mut twice = Vec::new();
    for (index, (part, scan)) in parts.iter().zip(scans).enumerate() {
        let mut remap = Remap::new(index, scan, layout);
        for payload in Parser::new(0).parse_all(part.wasm) {
            let Payload::ElementSection(reader) = payload.map_err(read_error(part.name))? else {
                continue;
            };
            for element in reader {
                let element = element.map_err(read_error(part.name))?;
                let (
                    ElementKind::Active {
                        table_index,
                        offset_expr,
                    },
                    ElementItems::Functions(items),
                ) = (element.kind, element.items)
                else {
                    continue;
                };
                let mut offset = offset_expr.get_operators_reader();
                let (Ok(Operator::I32Const { value }), Ok(Operator::End)) =
                    (offset.read(), offset.read())
                else {
                    continue;
                };
                let failed = |e| reencode_error(part.name, e);
                let table = remap
                    .table_index(table_index.unwrap_or(0))
                    .map_err(failed)?;
                for (at, function) in items.into_iter().enumerate() {
                    let function = function.map_err(read_error(part.name))?;
                    let function = remap.function_index(function).map_err(failed)?;
                    let slot = (value as u32).wrapping_add(at as u32);
                    if slots.insert((table, slot), function).is_some() {
                        twice.push((table, slot));
                    }
                }
            }
        }
    }
    for slot in twice {
        slots.remove(&slot);
    }
    Ok(slots)
}

enum BodyError {
    Read(wasmparser::BinaryReaderError),
    Reencode(reencode::Error<Missing>),
}

/// Re-encodes one function body into `code`, turning `i32.const slot;
/// call_indirect` into `call` where the slot's function is in the merged
/// module and of the called type. Returns how many it turned.
fn function(
    remap: &mut Remap<'_>,
    code: &mut wasm_encoder::CodeSection,
    body: &wasmparser::FunctionBody<'_>,
    slots: &HashMap<(u32, u32), u32>,
    scan: &Scan,
    layout: &Layout,
) -> Result<usize, BodyError> {
    let mut function = remap
        .new_function_with_parsed_locals(body)
        .map_err(BodyError::Reencode)?;
    let mut operators = body.get_operators_reader().map_err(BodyError::Read)?;
    let mut direct = 0;
    // An `i32.const` held back until the next operator shows whether it
    // is a slot for `call_indirect`.
    let mut held: Option<i32> = None;
    while !operators.eof() {
        let operator = operators.read().map_err(BodyError::Read)?;
        if let (
            Some(slot),
            Operator::CallIndirect {
                type_index,
                table_index,
            },
        ) = (held, &operator)
        {
            let table = remap
                .table_index(*table_index)
                .map_err(BodyError::Reencode)?;
            let target = slots.get(&(table, slot as u32)).copied().filter(|f| {
                let called = scan.types.get(*type_index as usize);
                called.is_some() && layout.function_type(*f) == called
            });
            if let Some(target) = target {
                function.instruction(&wasm_encoder::Instruction::Call(target));
                held = None;
                direct += 1;
                continue;
            }
        }
        if let Some(value) = held.take() {
            function.instruction(&wasm_encoder::Instruction::I32Const(value));
        }
        if let Operator::I32Const { value } = operator {
            held = Some(value);
            continue;
        }
        let instruction = remap.instruction(operator).map_err(BodyError::Reencode)?;
        function.instruction(&instruction);
    }
    if let Some(value) = held {
        function.instruction(&wasm_encoder::Instruction::I32Const(value));
    }
    code.function(&function);
    Ok(direct)
}

/// An index a part used that its scan did not see (cannot happen for a
/// valid part: each is validated first).
#[derive(Debug)]
pub struct Missing(&'static str, u32);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} is out of range", self.0, self.1)
    }
}

/// Renumbers one part's items into the merged module's index spaces.
struct Remap<'a> {
    part: usize,
    scan: &'a Scan,
    layout: &'a Layout,
}

impl<'a> Remap<'a> {
    fn new(part: usize, scan: &'a Scan, layout: &'a Layout) -> Remap<'a> {
        Remap { part, scan, layout }
    }

    /// The merged index of the part's `index`-th import of a kind: the
    /// part's imports of one kind, in order, are its indices of that kind.
    fn imported(
        &self,
        kind: fn(&TypeRef) -> bool,
        index: u32,
        what: &'static str,
    ) -> Result<u32, reencode::Error<Missing>> {
        self.scan
            .imports
            .iter()
            .filter(|merged| self.layout.import_types.get(**merged).is_some_and(kind))
            .nth(index as usize)
            .and_then(|merged| self.layout.import_index.get(*merged).copied())
            .ok_or(reencode::Error::UserError(Missing(what, index)))
    }

    fn first(
        &self,
        of: &[u32],
        what: &'static str,
        index: u32,
    ) -> Result<u32, reencode::Error<Missing>> {
        of.get(self.part)
            .map(|first| first + index)
            .ok_or(reencode::Error::UserError(Missing(what, index)))
    }
}

impl Reencode for Remap<'_> {
    type Error = Missing;

    fn type_index(&mut self, ty: u32) -> Result<u32, reencode::Error<Missing>> {
        self.first(&self.layout.first_type, "type", ty)
    }

    fn function_index(&mut self, function: u32) -> Result<u32, reencode::Error<Missing>> {
        // No part imports functions (`unify`), so a part's function index
        // is one of its own.
        self.first(&self.layout.first_function, "function", function)
    }

    fn element_index(&mut self, element: u32) -> Result<u32, reencode::Error<Missing>> {
        self.first(&self.layout.first_element, "element segment", element)
    }

    fn data_index(&mut self, data: u32) -> Result<u32, reencode::Error<Missing>> {
        self.first(&self.layout.first_data, "data segment", data)
    }

    fn table_index(&mut self, table: u32) -> Result<u32, reencode::Error<Missing>> {
        self.imported(|t| matches!(t, TypeRef::Table(_)), table, "table")
    }

    fn memory_index(&mut self, memory: u32) -> Result<u32, reencode::Error<Missing>> {
        self.imported(|t| matches!(t, TypeRef::Memory(_)), memory, "memory")
    }

    fn global_index(&mut self, global: u32) -> Result<u32, reencode::Error<Missing>> {
        self.imported(|t| matches!(t, TypeRef::Global(_)), global, "global")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, ElementSection, Elements, EntityType, ExportKind,
        ExportSection, Function, FunctionSection, GlobalType, ImportSection, Instruction,
        MemoryType, Module, RefType, TableType, TypeSection, ValType,
    };

    fn memory(minimum: u64) -> EntityType {
        EntityType::Memory(MemoryType {
            minimum,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        })
    }

    fn table(minimum: u64) -> EntityType {
        EntityType::Table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum,
            maximum: None,
            shared: false,
        })
    }

    fn function(instructions: &[Instruction<'_>]) -> Function {
        let mut f = Function::new([]);
        for i in instructions {
            f.instruction(i);
        }
        f.instruction(&Instruction::End);
        f
    }

    /// Puts its function 0 (`() -> i32`, returning 7) in slot 5, and "abc"
    /// at address 100.
    fn callee() -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([], [ValType::I32]);
        let mut imports = ImportSection::new();
        imports.import("__wasm_split", "memory", memory(1));
        imports.import("__wasm_split", "__indirect_function_table", table(10));
        let mut functions = FunctionSection::new();
        functions.function(0);
        let mut elements = ElementSection::new();
        elements.active(
            None,
            &ConstExpr::i32_const(5),
            Elements::Functions([0].as_slice().into()),
        );
        let mut code = CodeSection::new();
        code.function(&function(&[Instruction::I32Const(7)]));
        let mut data = DataSection::new();
        data.active(0, &ConstExpr::i32_const(100), b"abc".iter().copied());
        let mut module = Module::new();
        module
            .section(&types)
            .section(&imports)
            .section(&functions)
            .section(&elements)
            .section(&code)
            .section(&data);
        module.finish()
    }

    /// Imports the table first and asks for more of it and the memory;
    /// calls slot 5 (in `callee`) and slot 6 (elsewhere), adding the stack
    /// pointer; `export` adds an export.
    fn caller(export: bool) -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([ValType::I32], [ValType::I32]);
        types.ty().function([], [ValType::I32]);
        let mut imports = ImportSection::new();
        imports.import("__wasm_split", "__indirect_function_table", table(12));
        imports.import("__wasm_split", "memory", memory(2));
        imports.import(
            "__wasm_split",
            "__wasm_split_shared0",
            EntityType::Global(GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            }),
        );
        let mut functions = FunctionSection::new();
        functions.function(1);
        functions.function(1);
        let call = |slot| {
            [
                Instruction::I32Const(slot),
                Instruction::CallIndirect {
                    type_index: 1,
                    table_index: 0,
                },
                Instruction::GlobalGet(0),
                Instruction::I32Add,
            ]
        };
        let mut code = CodeSection::new();
        code.function(&function(&call(5)));
        code.function(&function(&call(6)));
        let mut module = Module::new();
        module.section(&types).section(&imports).section(&functions);
        if export {
            let mut exports = ExportSection::new();
            exports.export("f", ExportKind::Func, 0);
            module.section(&exports);
        }
        module.section(&code);
        module.finish()
    }

    /// The two parts merged, the callee first.
    fn merge_pair(callee: &[u8], caller: &[u8]) -> Result<Merged, MergeError> {
        merge(&[
            Part {
                name: "callee",
                wasm: callee,
            },
            Part {
                name: "caller",
                wasm: caller,
            },
        ])
    }

    #[test]
    fn parts_share_their_imports_and_call_each_other_directly() {
        let (callee, caller) = (callee(), caller(false));
        let merged = merge_pair(&callee, &caller);
        let merged = match merged {
            Ok(merged) => merged,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(merged.direct_calls, 1, "slot 5 only: slot 6 is elsewhere");

        let mut imports = Vec::new();
        let mut bodies = Vec::new();
        for payload in Parser::new(0).parse_all(&merged.wasm) {
            match payload.expect("a valid module") {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.expect("an import");
                        imports.push(format!("{} {:?}", import.name, import.ty));
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let ops: Vec<String> = body
                        .get_operators_reader()
                        .expect("operators")
                        .into_iter()
                        .map(|op| format!("{:?}", op.expect("an operator")))
                        .collect();
                    bodies.push(ops.join(" "));
                }
                _ => {}
            }
        }
        assert_eq!(imports.len(), 3, "{imports:?}");
        assert!(imports[0].starts_with("memory") && imports[0].contains("initial: 2"));
        assert!(imports[1].starts_with("__indirect_function_table"));
        assert!(imports[1].contains("initial: 12"), "{imports:?}");
        assert_eq!(bodies.len(), 3);
        // The caller's global is the merged module's only one, and its
        // call of slot 5 is a call of the callee's function, now function 0.
        assert_eq!(
            bodies[1],
            "Call { function_index: 0 } GlobalGet { global_index: 0 } I32Add End"
        );
        assert!(bodies[2].starts_with("I32Const { value: 6 } CallIndirect"));
    }

    #[test]
    fn a_module_that_exports_is_refused() {
        let (callee, caller) = (callee(), caller(true));
        let merged = merge_pair(&callee, &caller);
        assert!(
            matches!(&merged, Err(MergeError::Unexpected { part, .. }) if part == "caller"),
            "{:?}",
            merged.map(|m| m.direct_calls)
        );
    }
}
