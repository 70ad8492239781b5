import Foundation
import Testing

import Earshot
import EarshotService

/// Numbers followed by a unit or a `#` comment say so (not "out of range"), and every group-name list takes the
/// same separators (trial 5 #11).
@Suite("Configuration value text")
struct ConfigValueTextTests {
    private func error(_ text: String) -> EarshotError? {
        AudioTestFiles.error { () throws(EarshotError) in _ = try DaemonConfiguration.parse(text, source: "c.conf") }
    }

    @Test func aUnitOrACommentAfterANumberIsNamed() {
        #expect(error("[analysis]\ngate_dbfs = -50 dB\n") == EarshotError(
            .config,
            "c.conf:2: [analysis] gate_dbfs = -50 dB: must be in [-120, 0] dBFS, as a plain number without a unit or other text after it (write -50)"))
        #expect(error("[analysis]\ngate_dbfs = -45   # quieter rooms\n") == EarshotError(
            .config,
            "c.conf:2: [analysis] gate_dbfs = -45   # quieter rooms: must be in [-120, 0] dBFS; '#' after a value is not a comment (write -45, and put the comment on a line of its own or after \" ;\")"))
        #expect(error("[detection]\nwatch = loud\n[group.loud]\nlevel_dbfs = -30 dBFS\n") == EarshotError(
            .config,
            "c.conf:4: [group.loud] level_dbfs = -30 dBFS: must be in [-120, 0] dBFS, as a plain number without a unit or other text after it (write -30)"))
        // A value that is not a number at all keeps the plain requirement.
        #expect(error("[analysis]\ngate_dbfs = loud\n") == EarshotError(
            .config, "c.conf:2: [analysis] gate_dbfs = loud: must be in [-120, 0] dBFS"))
        // " ;" is a comment.
        #expect(error("[analysis]\ngate_dbfs = -45 ; quieter rooms\n") == nil)
    }

    @Test func groupListsTakeBarsCommasAndSpacesAlike() throws {
        let text = """
            [detection]
            watch = baby_cry glass_break,smoke_alarm | co_alarm
            [notify]
            url = http://127.0.0.1:9/x
            groups = baby_cry|glass_break, smoke_alarm
            [clips]
            groups = baby_cry glass_break

            """
        let configuration = try DaemonConfiguration.parse(text, source: "c.conf")
        #expect(configuration.detection.watch == ["baby_cry", "glass_break", "smoke_alarm", "co_alarm"])
        #expect(configuration.notify.groups == ["baby_cry", "glass_break", "smoke_alarm"])
        #expect(configuration.clips.groups == ["baby_cry", "glass_break"])
        #expect(error("[clips]\ngroups = Baby_Cry\n") == EarshotError(
            .config,
            "c.conf:2: [clips] groups = Baby_Cry: \"Baby_Cry\" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"))
    }
}
