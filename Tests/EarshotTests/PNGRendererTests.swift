import CRSVG
import EarshotPNG
import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Reads PNG files back independently of the renderer: the IHDR chunk by hand, the pixels with cairo's PNG reader.
enum PNGTestSupport {
    /// Width, height, bit depth and colour type from the IHDR chunk, which follows the 8-byte signature
    /// (4-byte length, "IHDR", then big-endian width and height, bit depth, colour type).
    static func header(_ png: Data) -> (width: Int, height: Int, bitDepth: Int, colourType: Int)? {
        let bytes = [UInt8](png.prefix(26))
        guard bytes.count == 26, Array(bytes[0..<8]) == [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A],
              Array(bytes[12..<16]) == Array("IHDR".utf8)
        else { return nil }
        func u32(_ at: Int) -> Int { bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
        return (u32(16), u32(20), Int(bytes[24]), Int(bytes[25]))
    }

    /// An 8-bit colour.
    struct RGB: Equatable, CustomStringConvertible {
        var red: Int, green: Int, blue: Int
        init(_ red: Int, _ green: Int, _ blue: Int) {
            self.red = red
            self.green = green
            self.blue = blue
        }
        /// `#rrggbb`.
        init(hex: String) {
            let value = Int(hex.dropFirst(), radix: 16) ?? 0
            self.init(value >> 16 & 0xFF, value >> 8 & 0xFF, value & 0xFF)
        }
        /// Every channel within `tolerance` of `other`'s.
        func isClose(to other: RGB, tolerance: Int = 2) -> Bool {
            abs(red - other.red) <= tolerance && abs(green - other.green) <= tolerance && abs(blue - other.blue) <= tolerance
        }
        var description: String { "(\(red), \(green), \(blue))" }
        static let white = RGB(255, 255, 255)
    }

    /// The pixels of a PNG, decoded by `cairo_image_surface_create_from_png_stream` (opaque images only: the tests'
    /// images are).
    struct Pixels {
        let width: Int, height: Int
        private let words: [UInt32]

        init?(png: Data) {
            final class Reader {
                let bytes: [UInt8]
                var offset = 0
                init(_ bytes: [UInt8]) { self.bytes = bytes }
            }
            let reader = Reader([UInt8](png))
            let surface = cairo_image_surface_create_from_png_stream({ closure, buffer, length in
                let reader = Unmanaged<Reader>.fromOpaque(closure!).takeUnretainedValue()
                guard let buffer, reader.offset + Int(length) <= reader.bytes.count else { return CAIRO_STATUS_READ_ERROR }
                for index in 0..<Int(length) { buffer[index] = reader.bytes[reader.offset + index] }
                reader.offset += Int(length)
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(reader).toOpaque())
            defer { cairo_surface_destroy(surface) }
            guard cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS else { return nil }
            cairo_surface_flush(surface)
            width = Int(cairo_image_surface_get_width(surface))
            height = Int(cairo_image_surface_get_height(surface))
            let stride = Int(cairo_image_surface_get_stride(surface))
            guard let data = cairo_image_surface_get_data(surface) else { return nil }
            // ARGB32 and RGB24 both keep a pixel in one native-endian 32-bit word: 0xAARRGGBB (alpha unused in RGB24).
            var words: [UInt32] = []
            words.reserveCapacity(width * height)
            for y in 0..<height {
                let row = UnsafeRawPointer(data + y * stride)
                for x in 0..<width { words.append(row.load(fromByteOffset: x * 4, as: UInt32.self)) }
            }
            self.words = words
        }

        subscript(x: Int, y: Int) -> RGB {
            let word = words[y * width + x]
            return RGB(Int(word >> 16 & 0xFF), Int(word >> 8 & 0xFF), Int(word & 0xFF))
        }

        /// Pixels whose three channels are all below 128, in `x` x `y`.
        func darkCount(x: Range<Int>, y: Range<Int>) -> Int {
            var count = 0
            for row in y {
                for column in x {
                    let pixel = self[column, row]
                    if pixel.red < 128, pixel.green < 128, pixel.blue < 128 { count += 1 }
                }
            }
            return count
        }
    }
}

@Suite("PNG: report charts rendered with librsvg")
struct PNGRendererTests {
    typealias RGB = PNGTestSupport.RGB

    /// The chart's fills (`SnoreReport.svg()`'s style sheet).
    static let barColour = RGB(hex: "#3b6fb6"), episodeColour = RGB(hex: "#e3a33b"), loudestColour = RGB(hex: "#c0392b")

    @Test("the hour report's chart at 2x: 1920 x 700 RGB, white background, bars, episodes and markers in their colours")
    func hourChart() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let image = try SnoreTests.hour.png(timeZone: utc)
        #expect(image.width == 1920 && image.height == 700)
        let header = try #require(PNGTestSupport.header(image.data))
        #expect(header.width == 1920 && header.height == 700)
        // cairo writes an opaque ARGB32 surface as 8-bit RGB (colour type 2).
        #expect(header.bitDepth == 8 && header.colourType == 2)
        let pixels = try #require(PNGTestSupport.Pixels(png: image.data))
        #expect(pixels.width == 1920 && pixels.height == 700)

        // Points in SVG units, doubled. Corners and an empty bin (bin 5, between the 0 % and 25 % grid lines) are white.
        for (x, y) in [(0, 0), (1919, 0), (0, 699), (1919, 699), (2 * 290, 2 * 220)] {
            #expect(pixels[x, y] == .white, "pixel (\(x), \(y)) is \(pixels[x, y])")
        }
        // Bin 0 (81 s of 300): x 72.5-144.2, y 194.7-246.
        let bar = pixels[2 * 108, 2 * 220]
        #expect(bar.isClose(to: Self.barColour), "bar pixel \(bar), want \(Self.barColour) +-2")
        // Above bin 0's bar (y < 194.7) is background again.
        #expect(pixels[2 * 108, 2 * 180] == .white)
        // Episode 1 (100-339 s): x 96.2-154.1 on the strip at y 276-290.
        let episode = pixels[2 * 125, 2 * 283]
        #expect(episode.isClose(to: Self.episodeColour), "episode pixel \(episode), want \(Self.episodeColour) +-2")
        // The loudest moment at 470 s: a circle of radius 4 at x 72 + 872 * 470 / 3600 = 185.8, y 50.
        let marker = pixels[Int(2 * 185.8), 2 * 50]
        #expect(marker.isClose(to: Self.loudestColour), "marker pixel \(marker), want \(Self.loudestColour) +-2")
        // The title is drawn (a font was found): its box x 72-900, y 8-26 holds thousands of dark pixels.
        let titleInk = pixels.darkCount(x: 2 * 72..<2 * 900, y: 2 * 8..<2 * 26)
        #expect(titleInk > 5_000, "only \(titleInk) dark pixels in the title: is fonts-dejavu-core installed?")
    }

    @Test("scale 1 gives the SVG's own 960 x 350 pixels, the same colours at the same SVG points")
    func scaleOne() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let image = try SnoreTests.hour.png(timeZone: utc, scale: 1)
        let header = try #require(PNGTestSupport.header(image.data))
        #expect(header.width == 960 && header.height == 350)
        let pixels = try #require(PNGTestSupport.Pixels(png: image.data))
        #expect(pixels[0, 0] == .white && pixels[959, 349] == .white)
        #expect(pixels[108, 220].isClose(to: Self.barColour))
        #expect(pixels[125, 283].isClose(to: Self.episodeColour))
    }

    @Test("samples/snore-report-example.png is samples/snore-report-example.svg rendered at 2x")
    func samplePNGIsCurrent() throws {
        let root = TestPaths.packageRoot.appendingPathComponent("samples")
        let rendered = try PNGRenderer().render(contentsOf: root.appendingPathComponent("snore-report-example.svg").path)
        let committed = try Data(contentsOf: root.appendingPathComponent("snore-report-example.png"))
        let header = try #require(PNGTestSupport.header(committed))
        #expect(header.width == 1920 && header.height == 700)
        let new = try #require(PNGTestSupport.Pixels(png: rendered.data))
        let old = try #require(PNGTestSupport.Pixels(png: committed))
        try #require(new.width == old.width && new.height == old.height)
        // Identical with the same librsvg/freetype; other versions may antialias text a little differently.
        var differing = 0
        for y in 0..<new.height {
            for x in 0..<new.width where !new[x, y].isClose(to: old[x, y]) { differing += 1 }
        }
        #expect(differing <= new.width * new.height / 1000, "\(differing) pixels differ by more than 2: re-render with earshot report --from-svg")
    }

    @Test("an unusable SVG gives one line naming it, what is wrong and the fix (exit status 65)")
    func badSVG() throws {
        let renderer = PNGRenderer()
        let cases: [(svg: String, source: String?, message: String)] = [
            ("hello", "bad.svg",
             "cannot render bad.svg as PNG: XML parse error: line 1 column 1: Start tag expected, '<' not found (bad.svg must be an SVG document, such as a snore report's .svg)"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><rect", "cut.svg",
             "cannot render cut.svg as PNG: XML parse error: line 1 column 69: Premature end of data in tag svg line 1 (cut.svg must be an SVG document, such as a snore report's .svg)"),
            ("<html/>", "page.html",
             "cannot render page.html as PNG: XML does not have <svg> root (page.html must be an SVG document, such as a snore report's .svg)"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\"/>", "sizeless.svg",
             "cannot render sizeless.svg as PNG: the SVG has no width and height in pixels (give its <svg> element width and height attributes in px)"),
            ("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" height=\"100%\"/>", "relative.svg",
             "cannot render relative.svg as PNG: the SVG has no width and height in pixels (give its <svg> element width and height attributes in px)"),
            ("", nil,
             "cannot render the chart as PNG: XML parse error: Input file is too short (a bug in earshot's chart: please report it with the chart written by --svg)"),
        ]
        for (svg, source, message) in cases {
            do {
                _ = try renderer.render(svg: svg, source: source)
                Issue.record("\(svg.debugDescription) was rendered")
            } catch {
                #expect(error.message == message)
                #expect(error.exitStatus == 65)
            }
        }
        // 960 units at scale 40 is 38,400 pixels: more than cairo can hold.
        let huge = SnoreTests.hour.svg()
        #expect(throws: EarshotError(.data, "cannot render the chart as PNG: 38400 x 14000 pixels is outside cairo's 1 to 32767 pixels a side (use a scale that fits, e.g. --png-scale 1)")) {
            try PNGRenderer(scale: 40).render(svg: huge)
        }
        // A scale too large for an Int is refused the same way, not trapped on.
        #expect(throws: EarshotError.self) { try PNGRenderer(scale: 1e300).render(svg: huge) }
    }

    @Test("an unwritable PNG path or unreadable SVG gives one line with the system's reason; nothing is left behind")
    func fileErrors() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let image = try SnoreTests.hour.png(scale: 1)
        let missing = directory.appendingPathComponent("no/such/dir/night.png").path
        do {
            try image.write(to: missing)
            Issue.record("writing into a missing directory succeeded")
        } catch {
            #expect(error.message == "cannot write \(missing): No such file or directory (check the directory and free space)")
            #expect(error.exitStatus == 73)
            #expect(error.cause == "No such file or directory")
        }
        // A directory in the way: the temporary file is written, the rename fails, the temporary file is removed.
        let occupied = directory.appendingPathComponent("occupied")
        try FileManager.default.createDirectory(at: occupied, withIntermediateDirectories: true)
        #expect(throws: EarshotError(.cannotCreate, "cannot write \(occupied.path): Is a directory (check the directory and free space)", cause: "Is a directory")) {
            try image.write(to: occupied.path)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["occupied"])

        // A good write replaces the file in one step and leaves only it.
        let target = directory.appendingPathComponent("night.png")
        try Data("old".utf8).write(to: target)
        try image.write(to: target.path)
        #expect(try Data(contentsOf: target) == image.data)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["night.png", "occupied"])

        let absent = directory.appendingPathComponent("absent.svg").path
        #expect(throws: EarshotError(.noInput, "cannot read \(absent): No such file or directory (check the path)", cause: "No such file or directory")) {
            try PNGRenderer().render(contentsOf: absent)
        }
    }
}
