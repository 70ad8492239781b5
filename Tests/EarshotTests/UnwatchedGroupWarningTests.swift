import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("[notify]/[clips] groups that are not watched")
struct UnwatchedGroupWarningTests {
    @Test("[notify] groups / [clips] groups naming an unwatched group: a warning with the subscribe hint; snoring and alarm_chirp are published")
    func unwatchedGroups() throws {
        let text = "[detection]\nwatch = smoke_alarm | baby_cry\n[notify]\nurl = http://127.0.0.1:9/x\ngroups = dog_bark | snoring | alarm_chirp | baby_cry\n[clips]\nenabled = true\ngroups = dog_bark | glass_break\n"
        let configuration = try DaemonConfiguration.parse(text, source: "g.conf")
        #expect(configuration.warnings() == [
            "g.conf:5: [notify] groups: dog_bark is not watched, so it is never notified (add it to [detection] watch, or take it out of [notify] groups)",
            "g.conf:8: [clips] groups: dog_bark, glass_break are not watched, so they are never clipped (add them to [detection] watch, or take them out of [clips] groups)",
        ])
        let watched = try DaemonConfiguration.parse("[detection]\nwatch = fire_alarm | dog_bark\n[notify]\nurl = http://127.0.0.1:9/x\ngroups = smoke_alarm dog_bark\n", source: "g.conf")
        #expect(watched.warnings() == [])
    }

    @Test("earshotd --check-config prints the unwatched-group warning and exits 0", .needsEarshotdBuilt)
    func unwatchedGroupFromCheckConfig() throws {
        let scratch = try CheckScratch("[output]\nsocket = DIR/g.sock\n[notify]\nurl = http://127.0.0.1:9/x\ngroups = dog_bark\n")
        defer { scratch.remove() }
        // Not readable by every user: an inline url would add its own warning (NotifySecretTests).
        #expect(chmod(scratch.config, 0o600) == 0)
        let result = try scratch.check()
        #expect(result.status == 0)
        #expect(result.error == "earshotd: warning: \(scratch.config):5: [notify] groups: dog_bark is not watched, so it is never notified (add it to [detection] watch, or take it out of [notify] groups)\n")
    }
}
