internal import CRSVG
import EarshotSupport
import EarshotService
import Foundation

/// Renders SVG documents (the report charts) as PNG images, with librsvg and cairo.
///
/// The image is `scale` times the SVG's intrinsic size in pixels (its `width` and `height`, CSS pixels at 96 dpi),
/// rounded to whole pixels, on an opaque white background; cairo writes it as 8-bit RGB (colour type 2) when every
/// pixel is opaque. Text uses the fonts fontconfig finds (the charts ask for DejaVu Sans, Debian's
/// `fonts-dejavu-core`). External references (images, fonts by URL) are not loaded: the document has no base URL.
///
/// This module links librsvg, cairo, pango and glib; only the command line uses it, so the daemon never maps them.
///
/// - Important: A renderer holds no C state: each call makes and frees its own librsvg handle and cairo surface, so
///   calls from several threads at once are safe.
package struct PNGRenderer: Sendable {
    /// Output pixels per SVG pixel: 2 (the default) gives sharp text on high-density screens and when zoomed.
    package var scale: Double

    /// The default `scale`: 2, so the 960 x 350 snore chart becomes 1920 x 700 pixels.
    package static let defaultScale = 2.0

    /// cairo's largest image side, pixels.
    package static let maximumSide = 32_767

    /// - Parameter scale: output pixels per SVG pixel, finite and > 0.
    package init(scale: Double = PNGRenderer.defaultScale) {
        precondition(scale.isFinite && scale > 0, "PNGRenderer: scale must be finite and > 0, got \(scale)")
        self.scale = scale
    }

    /// Renders the SVG document `svg` (a string) as a PNG image, as the `DataProtocol` variant below does.
    package func render(svg: String, source: String? = nil) throws(EarshotError) -> PNGImage {
        try render(svg: Data(svg.utf8), source: source)
    }

    /// Reads the SVG file at `path` and renders it, naming `path` in errors.
    ///
    /// - Throws: `EarshotError(.noInput)` when the file cannot be opened or is not a regular file, `.io` when it
    ///   cannot be read, e.g. `cannot read night.svg: No such file or directory (check the path)`,
    ///   `cannot read f: is a FIFO (named pipe), not a regular file (give the SVG file, such as a snore report's
    ///   .svg)`; then as ``render(svg:source:)``.
    ///
    /// The corresponding C functions are `open`, `fstat` and `read`.
    package func render(contentsOf path: String) throws(EarshotError) -> PNGImage {
        func failure(_ code: EarshotError.Code, _ errnoValue: Int32) -> EarshotError {
            let text = String(cString: strerror(errnoValue))
            return EarshotError(code, "cannot read \(path): \(text) (check the path)", cause: text)
        }
        // RegularFile.open never waits on a FIFO (open(2) of one would wait for a writer forever).
        let descriptor: Int32
        do {
            descriptor = try RegularFile.open(path)
        } catch {
            switch error {
            case .cannotOpen(let code): throw failure(.noInput, code)
            case .notRegularFile(let kind):
                throw EarshotError(
                    .noInput, "cannot read \(path): is \(kind.phrase), not a regular file (give the SVG file, such as a snore report's .svg)")
            case .readFailed(let code): throw failure(.io, code)
            case .tooLarge: throw failure(.io, EFBIG)  // open has no limit: not thrown
            }
        }
        defer { close(descriptor) }
        var document: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure(.io, errno)
            }
            if count == 0 { break }
            document.append(contentsOf: chunk[..<count])
        }
        return try render(svg: document, source: path)
    }

    /// Renders `svg` as a PNG image.
    ///
    /// - Parameters:
    ///   - svg: a complete SVG document (UTF-8), with `width` and `height` in pixels.
    ///   - source: the file the SVG was read from, named in error messages; nil for a chart made in memory.
    /// - Throws: `EarshotError(.data)` when the SVG is not well-formed, has no size, is too large at this scale, or
    ///   cannot be drawn; the message names `source` and the fix, `cause` keeps librsvg's or cairo's text.
    ///
    /// The corresponding C functions are `rsvg_handle_new_from_data`, `rsvg_handle_render_document`,
    /// `cairo_image_surface_create` and `cairo_surface_write_to_png_stream`.
    package func render(svg: some DataProtocol, source: String? = nil) throws(EarshotError) -> PNGImage {
        let subject = source ?? "the chart"
        let fix = source.map { "\($0) must be an SVG document, such as a snore report's .svg" }
            ?? "a bug in earshot's chart: please report it with the chart written by --svg"
        func failure(_ what: String, cause: String? = nil, fix: String = fix) -> EarshotError {
            EarshotError(.data, "cannot render \(subject) as PNG: \(what) (\(fix))", cause: cause)
        }

        let handle = try SVGHandle(document: Array(svg), failure: { detail in failure(Self.readable(detail), cause: detail) })
        rsvg_handle_set_dpi(handle.pointer, 96)
        var svgWidth = 0.0, svgHeight = 0.0
        guard rsvg_handle_get_intrinsic_size_in_pixels(handle.pointer, &svgWidth, &svgHeight) != 0,
              svgWidth > 0, svgHeight > 0, svgWidth.isFinite, svgHeight.isFinite
        else {
            throw failure("the SVG has no width and height in pixels",
                          fix: "give its <svg> element width and height attributes in px")
        }
        let scaledWidth = (svgWidth * scale).rounded(), scaledHeight = (svgHeight * scale).rounded()
        let side = 1...Double(Self.maximumSide)
        guard side.contains(scaledWidth), side.contains(scaledHeight) else {
            func text(_ value: Double) -> String { value.isFinite && abs(value) < 1e15 ? "\(Int(value))" : "\(value)" }
            throw failure("\(text(scaledWidth)) x \(text(scaledHeight)) pixels is outside cairo's 1 to \(Self.maximumSide) pixels a side",
                          fix: "use a scale that fits, e.g. --png-scale 1")
        }
        let width = Int(scaledWidth), height = Int(scaledHeight)

        let surface = try CairoSurface(width: width, height: height, failure: { detail in failure("cairo: \(detail)", cause: detail) })
        let context = try CairoContext(surface: surface, failure: { detail in failure("cairo: \(detail)", cause: detail) })
        // White first: the SVG may leave parts transparent, and a PNG viewer's checkerboard is no background.
        cairo_set_source_rgb(context.pointer, 1, 1, 1)
        cairo_paint(context.pointer)
        var viewport = RsvgRectangle(x: 0, y: 0, width: svgWidth * scale, height: svgHeight * scale)
        var error: UnsafeMutablePointer<GError>?
        guard rsvg_handle_render_document(handle.pointer, context.pointer, &viewport, &error) != 0 else {
            let detail = Self.take(error) ?? "librsvg could not draw it"
            throw failure(Self.readable(detail), cause: detail)
        }
        let drawn = cairo_status(context.pointer)
        guard drawn == CAIRO_STATUS_SUCCESS else {
            let detail = String(cString: cairo_status_to_string(drawn))
            throw failure("cairo: \(detail)", cause: detail)
        }
        cairo_surface_flush(surface.pointer)

        let sink = ByteSink()
        let written = withExtendedLifetime(sink) {
            cairo_surface_write_to_png_stream(surface.pointer, { closure, bytes, length in
                guard let closure, let bytes else { return CAIRO_STATUS_WRITE_ERROR }
                Unmanaged<ByteSink>.fromOpaque(closure).takeUnretainedValue()
                    .data.append(UnsafeBufferPointer(start: bytes, count: Int(length)))
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(sink).toOpaque())
        }
        guard written == CAIRO_STATUS_SUCCESS else {
            let detail = String(cString: cairo_status_to_string(written))
            throw failure("cairo cannot encode the PNG: \(detail)", cause: detail)
        }
        return PNGImage(data: sink.data, width: width, height: height)
    }

    /// The message of a `GError`, trimmed; frees it (`g_error_free`). Nil when there is no error.
    static func take(_ error: UnsafeMutablePointer<GError>?) -> String? {
        guard let error else { return nil }
        defer { g_error_free(error) }
        guard let message = error.pointee.message else { return "unknown librsvg error \(error.pointee.code)" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// librsvg's text for users: libxml2's "Error domain 1 code 4 on line 1 column 1 of data: ..." becomes
    /// "line 1 column 1: ...".
    static func readable(_ detail: String) -> String {
        detail.replacing(#/Error domain \d+ code \d+ on (line \d+ column \d+) of data:/#) { match in "\(match.1):" }
    }
}

/// A PNG file in memory and its size in pixels.
package struct PNGImage: Sendable, Equatable {
    /// The whole PNG file.
    package var data: Data
    /// Width in pixels.
    package var width: Int
    /// Height in pixels.
    package var height: Int

    package init(data: Data, width: Int, height: Int) {
        self.data = data
        self.width = width
        self.height = height
    }

    /// Writes the file to `path` with ``OutputFile``: a new path or a regular file atomically (into `.NAME.tmp-PID`
    /// beside it, then renamed over it, so that no reader sees half a PNG); a symbolic link's target, keeping the link;
    /// an existing device or FIFO in place, never replacing it.
    ///
    /// - Throws: `EarshotError(.cannotCreate)` naming `path`, the system's reason and the fix, e.g.
    ///   `cannot write /nonexistent/night.png: No such file or directory (check the directory and free space)`;
    ///   `EarshotError(.io)` when writing into a device or FIFO fails, e.g. `cannot write /dev/full: No space left on device`.
    ///
    /// The corresponding C functions are `open`, `write` and `rename`.
    package func write(to path: String) throws(EarshotError) {
        try OutputFile.write(data, to: path)
    }
}

extension SnoreReport {
    /// The timeline chart, ``svg(timeZone:layout:)``, as a PNG image `scale` times the layout's size
    /// (default 2: 1920 x 700 pixels).
    ///
    /// - Throws: `EarshotError(.data)` only if the chart cannot be drawn (a bug: the chart is always valid SVG).
    package func png(timeZone: TimeZone = .current, layout: ChartLayout = ChartLayout(), scale: Double = PNGRenderer.defaultScale)
        throws(EarshotError) -> PNGImage
    {
        try PNGRenderer(scale: scale).render(svg: svg(timeZone: timeZone, layout: layout))
    }
}

// MARK: Owners of the C objects

/// Owns an `RsvgHandle` (a GObject), unreferenced in `deinit`. The corresponding C function is
/// `rsvg_handle_new_from_data`.
private final class SVGHandle {
    let pointer: UnsafeMutablePointer<RsvgHandle>

    init(document: [UInt8], failure: (String) -> EarshotError) throws(EarshotError) {
        var error: UnsafeMutablePointer<GError>?
        let handle = document.withUnsafeBufferPointer { buffer in
            rsvg_handle_new_from_data(buffer.baseAddress, gsize(buffer.count), &error)
        }
        if let detail = PNGRenderer.take(error) {
            if let handle { g_object_unref(handle) }
            throw failure(detail)
        }
        guard let handle else { throw failure("librsvg returned no document") }
        pointer = handle
    }

    deinit { g_object_unref(pointer) }
}

/// Owns a cairo ARGB32 image surface, destroyed in `deinit`. The corresponding C function is
/// `cairo_image_surface_create`.
private final class CairoSurface {
    let pointer: OpaquePointer

    init(width: Int, height: Int, failure: (String) -> EarshotError) throws(EarshotError) {
        // cairo never returns NULL: a failed surface is an "error surface" whose status says why (and that must
        // be destroyed too).
        let surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, Int32(width), Int32(height))!
        let status = cairo_surface_status(surface)
        guard status == CAIRO_STATUS_SUCCESS else {
            cairo_surface_destroy(surface)
            throw failure(String(cString: cairo_status_to_string(status)))
        }
        pointer = surface
    }

    deinit { cairo_surface_destroy(pointer) }
}

/// Owns a cairo drawing context on a surface, destroyed in `deinit` (it keeps its own reference to the surface).
/// The corresponding C function is `cairo_create`.
private final class CairoContext {
    let pointer: OpaquePointer

    init(surface: CairoSurface, failure: (String) -> EarshotError) throws(EarshotError) {
        let context = cairo_create(surface.pointer)!
        let status = cairo_status(context)
        guard status == CAIRO_STATUS_SUCCESS else {
            cairo_destroy(context)
            throw failure(String(cString: cairo_status_to_string(status)))
        }
        pointer = context
    }

    deinit { cairo_destroy(pointer) }
}

/// The PNG bytes cairo's stream writer hands over, collected in order.
private final class ByteSink {
    var data = Data()
}
