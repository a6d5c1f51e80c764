//! A private CA and certificates for a deployment's services (`babysitter tls:generate`, the
//! compose stack's first start, the tests). Production deployments bring their own (cert-manager,
//! a corporate CA); this is for a stack that has none yet.
//!
//! Every leaf carries both the server and the client usage, so a service's one certificate
//! serves its port and authenticates its calls to other services under mTLS. Keys are ECDSA
//! P-256, written with mode 0600.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Why certificates could not be generated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A name is not a DNS name or IP address.
    #[error("`{name}` cannot be a certificate name: {reason}")]
    Name { name: String, reason: String },
    /// rcgen failed.
    #[error("cannot generate {what}: {reason}")]
    Generate { what: String, reason: String },
    /// The directory holds a CA but not every requested certificate.
    #[error(
        "`{}` already holds a CA (ca.crt) but not {missing}: remove the directory to generate everything again",
        dir.display()
    )]
    Partial { dir: PathBuf, missing: String },
    /// A file could not be written.
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One certificate to issue: its file stem and the names it is valid for (the first is its
/// common name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    /// `NAME.crt` / `NAME.key`.
    pub file_stem: String,
    /// DNS names and IP addresses.
    pub names: Vec<String>,
}

impl Leaf {
    /// A leaf for `name`, also valid for `localhost`, `127.0.0.1` and `::1` (so a probe or a
    /// port published on loopback can verify it) and `extra` names.
    pub fn for_host(name: &str, extra: &[String]) -> Self {
        let mut names = vec![name.to_owned()];
        for n in extra
            .iter()
            .map(String::as_str)
            .chain(["localhost", "127.0.0.1", "::1"])
        {
            if !names.iter().any(|m| m == n) {
                names.push(n.to_owned());
            }
        }
        Self {
            file_stem: name.to_owned(),
            names,
        }
    }
}

/// What [`generate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Generated {
    /// Every file was already there; nothing was written.
    AlreadyThere,
    /// These files were written.
    Wrote(Vec<PathBuf>),
}

/// Writes `ca.crt` + `ca.key` and `STEM.crt` + `STEM.key` for each leaf into `dir` (created).
/// Idempotent: when every file exists nothing changes.
pub fn generate(dir: &Path, leaves: &[Leaf]) -> Result<Generated, GenerateError> {
    let exists = |name: String| {
        let path = dir.join(name);
        path.try_exists()
            .map_err(|source| GenerateError::Write { path, source })
    };
    let mut missing: Vec<&Leaf> = Vec::new();
    for l in leaves {
        if !exists(format!("{}.crt", l.file_stem))? || !exists(format!("{}.key", l.file_stem))? {
            missing.push(l);
        }
    }
    if exists("ca.crt".into())? {
        if missing.is_empty() {
            return Ok(Generated::AlreadyThere);
        }
        return Err(GenerateError::Partial {
            dir: dir.to_owned(),
            missing: missing
                .iter()
                .map(|l| format!("{}.crt", l.file_stem))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let gen_err = |what: &str| {
        let what = what.to_owned();
        move |e: rcgen::Error| GenerateError::Generate {
            what: what.clone(),
            reason: e.to_string(),
        }
    };
    let ca_key = KeyPair::generate().map_err(gen_err("the CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err("the CA"))?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "babysitter deployment CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(gen_err("the CA"))?;
    let mut out = Vec::new();
    std::fs::create_dir_all(dir).map_err(|source| GenerateError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let ca_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);
    for leaf in leaves {
        let mut params =
            CertificateParams::new(leaf.names.clone()).map_err(|e| GenerateError::Name {
                name: leaf.names.join(", "),
                reason: e.to_string(),
            })?;
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.names[0].clone());
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let what = format!("the certificate of `{}`", leaf.file_stem);
        let key = KeyPair::generate().map_err(gen_err(&what))?;
        let cert = params.signed_by(&key, &issuer).map_err(gen_err(&what))?;
        out.push(write(
            dir,
            &format!("{}.crt", leaf.file_stem),
            &cert.pem(),
            false,
        )?);
        out.push(write(
            dir,
            &format!("{}.key", leaf.file_stem),
            &key.serialize_pem(),
            true,
        )?);
    }
    // The CA last: its presence is what marks the directory as complete.
    out.push(write(dir, "ca.key", &ca_key_pem, true)?);
    out.push(write(dir, "ca.crt", &ca_pem, false)?);
    Ok(Generated::Wrote(out))
}

fn write(dir: &Path, name: &str, text: &str, secret: bool) -> Result<PathBuf, GenerateError> {
    let path = dir.join(name);
    let err = |source| GenerateError::Write {
        path: path.clone(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut f = options.open(&path).map_err(err)?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(err)?;
    Ok(path)
}
