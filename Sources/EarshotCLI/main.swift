import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

// `earshot`: the command line. Argument parsing and wiring only; the work lives in the Earshot library. Every
// command (Commands.all) parses its arguments with ArgumentParser and runs through EarshotCommand.run: the same
// `--help`, the same usage errors (one `earshot: ...` line, status 64).

var arguments = Array(CommandLine.arguments.dropFirst())
let status: Int32
if arguments.isEmpty {
    // Nothing to do: the list of commands, on standard error as for a usage error.
    writeError(Commands.usage)
    status = 64
} else {
    let name = arguments.removeFirst()
    if let command = Commands.named(name) {
        status = command.run(arguments)
    } else {
        let error = Commands.unknown(name)
        reportError(error.message)
        status = error.exitStatus
    }
}
// Output written with print is buffered: a failure to write it (a full disk, > /dev/full) shows only here.
StandardOutput.finish()
exit(status)
