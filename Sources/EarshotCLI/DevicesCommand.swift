import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot devices`: list ALSA capture PCMs and the sound cards' capture devices.
enum DevicesCommand: EarshotCommand {
    static let name = "devices"
    static let usage = "usage: earshot devices"
    static let help = """
        \(usage)

        Lists the ALSA capture devices: the PCM names ALSA defines for capture (as `arecord -L` does) and each sound
        card's capture devices (hw:CARD,DEV). Give one to earshotd as --device PCM or [capture] device, or to
        earshot enroll --device PCM.
        """
    static let flags: [String] = []

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) {
        if let item = try parser.next() { throw parser.unexpected(item.text) }
    }

    static func execute(_ options: Void) -> Int32 {
        do {
            let text = CaptureDeviceReport.text(pcms: try CaptureDevice.capturePCMs(), cards: SoundCard.all())
            StandardOutput.write(text)
            return 0
        } catch let error as EarshotError {
            reportError(error.message)
            return error.exitStatus
        } catch {
            reportError("\(error)")
            return 69
        }
    }
}
