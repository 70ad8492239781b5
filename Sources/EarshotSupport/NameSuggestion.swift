import FoundationEssentials
import Glibc
import Dispatch

/// "Did you mean" hints for misspelt keys, sections, group names and class labels.
package enum NameSuggestion {
    /// The candidate closest to `name` by edit distance (case-insensitive), if it is close enough to be a likely
    /// typo: at most 2 edits, or a third of the name's length for long names.
    package static func likelyTypo(of name: String, among candidates: [String]) -> String? {
        let limit = max(2, name.count / 3)
        guard let best = nearest(to: name, among: candidates), best.distance <= limit else { return nil }
        return best.candidate
    }

    /// The class label closest to `name`, always (there is always a nearest label). AudioSet display names list
    /// synonyms separated by ", " ("Smoke detector, smoke alarm"), so each synonym is compared on its own as well
    /// as the whole name: "smoke alarm" finds "Smoke detector, smoke alarm" rather than "Fire alarm".
    ///
    /// Labels sharing more whole words with `name` come first ("Dog barking" finds "Dog", not "Crying, sobbing",
    /// which is fewer edits away); edit distance decides among labels sharing as many.
    package static func nearestLabel(to name: String, in labels: [String]) -> String? {
        let nameWords = words(name)
        var best: (label: String, shared: Int, distance: Int)?
        for label in labels {
            let shared = nameWords.intersection(words(label)).count
            let parts = [label] + label.split(separator: ",").map { $0.trimmingSpaces() }
            for part in parts {
                let distance = editDistance(name.lowercased(), part.lowercased())
                if let current = best, current.shared > shared || (current.shared == shared && current.distance <= distance) {
                    continue
                }
                best = (label, shared, distance)
            }
        }
        return best?.label
    }

    /// The lowercased words of `text` (runs of letters and digits).
    private static func words(_ text: String) -> Set<String> {
        Set(text.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init))
    }

    package static func nearest(to name: String, among candidates: [String]) -> (candidate: String, distance: Int)? {
        var best: (candidate: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(name.lowercased(), candidate.lowercased())
            if let current = best, current.distance <= distance { continue }
            best = (candidate, distance)
        }
        return best
    }

    /// Levenshtein distance over characters.
    package static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
