import FoundationEssentials
import Glibc
import EarshotAnalysis

/// Loudness over a run of analysis windows, from their RMS levels (dBFS): what events report as their level.
package enum LevelStatistics {
    /// Energy mean and maximum of levels in dBFS; both the floor (-120) for no levels.
    package static func levels(_ values: [Float]) -> (mean: Float, peak: Float) {
        guard !values.isEmpty else { return (ClassificationResult.levelFloorDBFS, ClassificationResult.levelFloorDBFS) }
        var energy = 0.0
        var peak = -Float.infinity
        for value in values {
            energy += pow(10, Double(value) / 10)
            peak = max(peak, value)
        }
        let mean = Float(10 * log10(energy / Double(values.count)))
        return (max(ClassificationResult.levelFloorDBFS, mean), peak)
    }
}
