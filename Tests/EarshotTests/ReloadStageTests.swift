import Foundation
import Testing
import EarshotDetection
import EarshotService
import EarshotTools

/// A reload ends only the events it must (trial 5 #1): a new threshold of one group left every other group's
/// event ended with reason `reload` and the window grid restarted, so one baby cry became two events.
@Suite("A reload ends only the events it must")
struct ReloadStageTests {
    static let base = "[detection]\nwatch = baby_cry | glass_break\n[history]\nenabled = false\n"

    /// The stage's outputs over samples/demo.flac in 0.2 s periods, with a reload to `reloaded` (a configuration
    /// text) before the period at `reloadFrame`: windows as "window START", events in full.
    static func outputs(_ text: String, reloaded: String? = nil, reloadFrame: Int = 89_600) throws -> [String] {
        try DemoStageRun.lines(text, reload: { position, stage in
            guard position == reloadFrame, let reloaded else { return nil }
            let fresh = try FileDetection(configuration: try DaemonConfiguration.parse(reloaded, source: "test"), configPath: nil)
            return try stage.reconfigure(
                settings: fresh.plan.stageSettings, engine: fresh.plan.engine, heads: fresh.heads,
                snoreHead: fresh.snoreHead, snoreHeadChanged: false)
        })
    }

    static func events(_ lines: [String], group: String) -> [String] {
        lines.filter { $0.hasPrefix("detection") && $0.contains("group: \"\(group)\"") }
    }

    @Test("glass_break's threshold reloaded at 5.6 s: baby_cry's open event goes on whole (2.40-9.60 s), the window grid stays, glass decides with the new threshold")
    func thresholdOfAnotherGroup() throws {
        let glassThreshold = Self.base + "[group.glass_break]\nthreshold = 0.97\n"
        let plain = try Self.outputs(Self.base)
        let reloaded = try Self.outputs(Self.base, reloaded: glassThreshold)
        let strict = try Self.outputs(glassThreshold)
        #expect(reloaded.filter { $0.hasPrefix("window") } == plain.filter { $0.hasPrefix("window") })
        #expect(!reloaded.contains { $0.contains("reload") && $0 != "reload" }, "\(reloaded.filter { !$0.hasPrefix("window") })")
        #expect(Self.events(reloaded, group: "baby_cry") == Self.events(plain, group: "baby_cry"))
        #expect(Self.events(plain, group: "baby_cry").last?.contains("start: 2.4, end: 9.6") == true, "\(Self.events(plain, group: "baby_cry"))")
        // The glass at 24 s is decided after the reload: as with the new threshold from the start.
        #expect(Self.events(reloaded, group: "glass_break") == Self.events(strict, group: "glass_break"))
        #expect(Self.events(reloaded, group: "glass_break") != Self.events(plain, group: "glass_break"))
    }

    @Test("baby_cry's hold reloaded at 5.6 s: only baby_cry's event ends (reason reload) and starts again; the grid stays")
    func rulesOfTheOpenGroup() throws {
        let plain = try Self.outputs(Self.base)
        let reloaded = try Self.outputs(Self.base, reloaded: Self.base + "[group.baby_cry]\nhold_seconds = 2\n")
        #expect(reloaded.filter { $0.hasPrefix("window") } == plain.filter { $0.hasPrefix("window") })
        let cry = Self.events(reloaded, group: "baby_cry")
        #expect(cry.count == 4, "\(cry)")
        #expect(cry.dropFirst().first?.contains("start: 2.4, end: ") == true, "\(cry)")
        #expect(cry.dropFirst().first?.contains("reload") == true, "\(cry)")
        #expect(Self.events(reloaded, group: "glass_break") == Self.events(plain, group: "glass_break"))
    }

    @Test("a new window restarts the grid and ends every open event (reason reload)")
    func newWindow() throws {
        let reloaded = try Self.outputs(Self.base, reloaded: Self.base + "[analysis]\nwindow = 1.92\n")
        let index = try #require(reloaded.firstIndex(of: "reload"))
        let before = reloaded[..<index].filter { $0.hasPrefix("detection offset") }
        #expect(before.count == 1 && before[0].contains("reload"), "\(before)")
        // The first window after the reload starts at the reload (5.60 s), not on the old 0.48 s grid.
        #expect(reloaded[(index + 1)...].first { $0.hasPrefix("window") } == "window 5.6")
    }
}
