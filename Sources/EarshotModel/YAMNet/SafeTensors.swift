import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// A read-only, memory-mapped safetensors file (https://github.com/huggingface/safetensors format: an 8-byte
/// little-endian header length, a JSON header, then the raw tensor bytes). Only `F32` tensors are read.
///
/// The file is mapped, not copied: tensors are views into the mapping and stay valid as long as the
/// `SafeTensorsFile` lives.
package final class SafeTensorsFile {
    package struct Entry {
        package let shape: [Int]
        package let offset: Int
        package let count: Int
    }

    package let path: String
    package let metadata: [String: String]
    private let entries: [String: Entry]
    private let base: UnsafeRawPointer
    private let length: Int
    private let dataStart: Int

    /// Maps `path` and parses its header.
    /// - Throws: `EarshotError(.noInput)` when the file cannot be opened, `EarshotError(.data)` when it is not a
    ///   well-formed safetensors file (short, bad header, offsets past the end, a dtype other than F32).
    package init(path: String) throws(EarshotError) {
        self.path = path
        let fd: Int32
        do {
            fd = try RegularFile.open(path)
        } catch {
            throw .posix(.noInput, "cannot open model file \(path)", errno: error.errno)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .posix(.noInput, "cannot read model file \(path)", errno: errno) }
        let size = Int(info.st_size)
        let damaged = "model file \(path) is damaged"
        let fix = "(re-run Models/convert-yamnet or reinstall Earshot)"
        guard size >= 8 else { throw EarshotError(.data, "\(damaged): \(size) bytes is too short \(fix)") }
        guard let mapping = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), mapping != MAP_FAILED else {
            throw .posix(.system, "cannot map model file \(path)", errno: errno)
        }
        base = UnsafeRawPointer(mapping)
        length = size
        let headerLength = Int(UInt64(littleEndian: base.loadUnaligned(as: UInt64.self)))
        guard headerLength > 0, headerLength <= size - 8 else {
            munmap(mapping, size)
            throw EarshotError(.data, "\(damaged): header length \(headerLength) exceeds the file \(fix)")
        }
        dataStart = 8 + headerLength
        let headerBytes = UnsafeRawBufferPointer(start: base + 8, count: headerLength)
        guard let header = (try? JSONValue.parse(headerBytes))?.objectValue else {
            munmap(mapping, size)
            throw EarshotError(.data, "\(damaged): its header is not JSON \(fix)")
        }
        var entries: [String: Entry] = [:]
        var metadata: [String: String] = [:]
        for entry in header.entries {
            let name = entry.key, fields = entry.value
            if name == "__metadata__" {
                for field in fields.objectValue?.entries ?? [] {
                    if let text = field.value.stringValue { metadata[field.key] = text }
                }
                continue
            }
            guard let dtype = fields["dtype"]?.stringValue, let shape = fields["shape"]?.intArrayValue,
                  let offsets = fields["data_offsets"]?.intArrayValue, offsets.count == 2
            else {
                munmap(mapping, size)
                throw EarshotError(.data, "\(damaged): tensor \"\(name)\" has a malformed header entry \(fix)")
            }
            let count = shape.reduce(1, *)
            guard dtype == "F32", offsets[0] >= 0, offsets[1] - offsets[0] == count * 4,
                  dataStart + offsets[1] <= size, offsets[0] % 4 == 0
            else {
                munmap(mapping, size)
                throw EarshotError(.data, "\(damaged): tensor \"\(name)\" (\(dtype) \(shape)) does not fit the file \(fix)")
            }
            entries[name] = Entry(shape: shape, offset: dataStart + offsets[0], count: count)
        }
        self.entries = entries
        self.metadata = metadata
    }

    deinit {
        munmap(UnsafeMutableRawPointer(mutating: base), length)
    }

    /// Drops the pages holding `tensors` from this process's memory (`madvise(MADV_DONTNEED)`): after the model has
    /// folded and packed a tensor it does not read it again, so the file's pages need not stay resident (they stay in
    /// the page cache and would be read back from there if touched). Best effort: an `madvise` failure changes
    /// nothing but the memory use.
    /// The corresponding C function is `madvise`.
    package func release(_ tensors: UnsafeBufferPointer<Float>...) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        guard page > 0 else { return }
        for tensor in tensors {
            guard let start = tensor.baseAddress else { continue }
            let from = UnsafeRawPointer(start) - base
            let to = from + tensor.count * MemoryLayout<Float>.stride
            let first = from / page * page
            let last = min(length, (to + page - 1) / page * page)
            guard first < last else { continue }
            _ = madvise(UnsafeMutableRawPointer(mutating: base + first), last - first, Int32(MADV_DONTNEED))
        }
    }

    /// The tensor `name`, checked against `shape`.
    /// - Throws: `EarshotError(.data)` when the tensor is missing or has another shape.
    package func tensor(_ name: String, shape: [Int]) throws(EarshotError) -> UnsafeBufferPointer<Float> {
        guard let entry = entries[name] else {
            throw EarshotError(.data, "model file \(path) lacks tensor \"\(name)\" (re-run Models/convert-yamnet)")
        }
        guard entry.shape == shape else {
            throw EarshotError(.data, "model file \(path): tensor \"\(name)\" has shape \(entry.shape), expected \(shape)")
        }
        // The converter aligns tensor data to 64 bytes, so the view is aligned for Float.
        let pointer = (base + entry.offset).assumingMemoryBound(to: Float.self)
        return UnsafeBufferPointer(start: pointer, count: entry.count)
    }
}
