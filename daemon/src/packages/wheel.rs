//! A wheel's file name (the binary distribution format, with the compatibility tags of the
//! packaging specifications) and whether a guest can install it: its Python, its ABI and its
//! platform must all be the guest's. Nothing else of a package is ever installed: a source
//! distribution would have to be built, which runs the package's code.

use std::str::FromStr;

use pep508_rs::PackageName;
use pep508_rs::pep440_rs::Version;

/// A wheel's file name, read: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub name: PackageName,
    pub version: Version,
    /// Every (python, abi, platform) the name's compressed tag sets expand to.
    tags: Vec<(String, String, String)>,
}

/// The most (python, abi, platform) tags a wheel's name may expand to.
const MAX_TAGS: usize = 256;

impl WheelName {
    /// `filename` read as a wheel's name; None if it is not one (a source distribution, or a
    /// name that does not follow the format).
    pub fn parse(filename: &str) -> Option<WheelName> {
        let stem = filename.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, python, abi, platform) = match parts.as_slice() {
            [name, version, python, abi, platform] => (name, version, python, abi, platform),
            [name, version, build, python, abi, platform]
                if build.starts_with(|c: char| c.is_ascii_digit()) =>
            {
                (name, version, python, abi, platform)
            }
            _ => return None,
        };
        let name = PackageName::from_str(name).ok()?;
        let version = Version::from_str(version).ok()?;
        // Each tag set is a few names in real wheels; a page could give thousands, whose
        // product would not fit in memory.
        let sets = [python, abi, platform].map(|set| set.split('.').count());
        if sets.iter().product::<usize>() > MAX_TAGS {
            return None;
        }
        let mut tags = Vec::new();
        for python in python.split('.') {
            for abi in abi.split('.') {
                for platform in platform.split('.') {
                    tags.push((python.to_owned(), abi.to_owned(), platform.to_owned()));
                }
            }
        }
        Some(WheelName {
            name,
            version,
            tags,
        })
    }

    /// How well the wheel fits `guest`: None if it does not; else higher for a wheel made for
    /// the guest's own interpreter and platform than for one that only runs there.
    pub fn fit(&self, guest: &GuestTags) -> Option<u32> {
        self.tags
            .iter()
            .filter_map(|(python, abi, platform)| {
                let interpreter = guest.interpreter(python, abi)?;
                let platform = guest.platform(platform)?;
                Some(interpreter * 100 + platform)
            })
            .max()
    }
}

/// What a guest runs wheels with: a CPython of this version, and, where it can load C
/// extensions, the glibc of its platform (x86_64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestTags {
    /// CPython 3.`minor`.
    pub minor: u32,
    /// The glibc minor version (2.`glibc`) of a guest that loads C extensions; None for one
    /// that runs pure Python only.
    pub glibc: Option<u32>,
}

impl GuestTags {
    /// The native Python guest: Debian 12's CPython 3.11 and glibc 2.36.
    pub const NATIVE: GuestTags = GuestTags {
        minor: 11,
        glibc: Some(36),
    };

    /// What the guest runs wheels for, as the error messages say it.
    pub fn describe(&self) -> String {
        match self.glibc {
            Some(glibc) => format!(
                "CPython 3.{} on Linux x86_64 (glibc 2.{glibc}), or pure Python",
                self.minor
            ),
            None => format!("pure Python for CPython 3.{}", self.minor),
        }
    }

    /// How specific a (python, abi) pair is to this guest's interpreter; None if it does not
    /// run there.
    fn interpreter(&self, python: &str, abi: &str) -> Option<u32> {
        let minor_of = |prefix: &str| -> Option<u32> {
            let rest = python.strip_prefix(prefix)?;
            match rest {
                "3" => Some(0),
                _ => rest.strip_prefix('3')?.parse().ok(),
            }
        };
        let native = self.glibc.is_some();
        match abi {
            // Pure Python: for Python 3, or a 3.x no newer than the guest's.
            "none" => {
                if let Some(minor) = minor_of("py") {
                    return (minor <= self.minor).then_some(1 + minor.min(1));
                }
                (minor_of("cp") == Some(self.minor)).then_some(3)
            }
            // The stable ABI of 3.x, which later versions keep.
            "abi3" if native => {
                let minor = minor_of("cp")?;
                (minor >= 2 && minor <= self.minor).then_some(4)
            }
            _ if native => {
                let own = format!("cp3{}", self.minor);
                (python == own && abi == own).then_some(5)
            }
            _ => None,
        }
    }

    /// How specific a platform tag is to this guest; None if it does not run there.
    fn platform(&self, platform: &str) -> Option<u32> {
        if platform == "any" {
            return Some(0);
        }
        let glibc = self.glibc?;
        let needs = match platform {
            "manylinux1_x86_64" => 5,
            "manylinux2010_x86_64" => 12,
            "manylinux2014_x86_64" => 17,
            _ => {
                let version = platform
                    .strip_prefix("manylinux_2_")?
                    .strip_suffix("_x86_64")?;
                version.parse().ok()?
            }
        };
        (needs <= glibc).then_some(1 + needs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WASM: GuestTags = GuestTags {
        minor: 11,
        glibc: None,
    };

    fn fit(filename: &str, guest: GuestTags) -> Option<u32> {
        WheelName::parse(filename).expect(filename).fit(&guest)
    }

    #[test]
    fn names_are_read_with_their_tags_and_build() {
        let wheel = WheelName::parse("Markdown_It_Py-3.0.0-py3-none-any.whl").unwrap();
        assert_eq!(wheel.name.as_ref(), "markdown-it-py");
        assert_eq!(wheel.version.to_string(), "3.0.0");
        let built = WheelName::parse("pkg-1.0-2-py2.py3-none-any.whl").unwrap();
        assert_eq!(built.tags.len(), 2);
        for bad in [
            "pkg-1.0.tar.gz",
            "pkg-1.0-py3-none.whl",
            "pkg-1.0-x-py3-none-any.whl",
            "pkg-not a version-py3-none-any.whl",
        ] {
            assert_eq!(WheelName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_native_guest_takes_its_own_wheels_and_pure_ones() {
        let native = GuestTags::NATIVE;
        for good in [
            "m-1-py3-none-any.whl",
            "m-1-py311-none-any.whl",
            "m-1-py2.py3-none-any.whl",
            "m-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "m-1-cp311-cp311-manylinux1_x86_64.whl",
            "m-1-cp38-abi3-manylinux_2_28_x86_64.whl",
            "m-1-cp311-cp311-manylinux_2_36_x86_64.whl",
        ] {
            assert!(fit(good, native).is_some(), "{good}");
        }
        for bad in [
            "m-1-py312-none-any.whl",
            "m-1-cp312-cp312-manylinux2014_x86_64.whl",
            "m-1-cp311-cp311-manylinux_2_38_x86_64.whl",
            "m-1-cp311-cp311-musllinux_1_1_x86_64.whl",
            "m-1-cp311-cp311-manylinux2014_aarch64.whl",
            "m-1-cp311-cp311-win_amd64.whl",
            "m-1-cp311-cp311-linux_x86_64.whl",
            "m-1-cp313-abi3-manylinux2014_x86_64.whl",
            "m-1-pp310-pypy310_pp73-manylinux2014_x86_64.whl",
        ] {
            assert_eq!(fit(bad, native), None, "{bad}");
        }
        // The interpreter's own build before the stable ABI before pure Python.
        let own = fit("m-1-cp311-cp311-manylinux2014_x86_64.whl", native);
        let stable = fit("m-1-cp38-abi3-manylinux2014_x86_64.whl", native);
        let pure = fit("m-1-py3-none-any.whl", native);
        assert!(own > stable && stable > pure);
    }

    #[test]
    fn a_pure_python_guest_takes_pure_wheels_only() {
        assert!(fit("m-1-py3-none-any.whl", WASM).is_some());
        assert_eq!(fit("m-1-cp311-cp311-manylinux2014_x86_64.whl", WASM), None);
        assert_eq!(fit("m-1-cp38-abi3-manylinux2014_x86_64.whl", WASM), None);
    }
}
