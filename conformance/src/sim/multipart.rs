//! `multipart/form-data` bodies, parsed from an already buffered body.

use bytes::Bytes;

/// One part of a form.
#[derive(Debug, Clone)]
pub struct FormField {
    /// The part's `name`.
    pub name: String,
    /// The part's `filename`, for file uploads.
    pub file_name: Option<String>,
    /// The part's own `Content-Type`, if given.
    pub content_type: Option<String>,
    /// The part's content.
    pub data: Bytes,
}

/// A parsed form: its fields in order.
#[derive(Debug, Clone, Default)]
pub struct Form {
    /// Every part, in body order.
    pub fields: Vec<FormField>,
}

impl Form {
    /// The first field called `name`.
    pub fn field(&self, name: &str) -> Option<&FormField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The first field called `name` as text, if it is valid UTF-8.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.field(name)
            .and_then(|f| std::str::from_utf8(&f.data).ok())
    }
}

/// True when a `Content-Type` value names a multipart form.
pub fn is_multipart(content_type: &str) -> bool {
    content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
}

/// Parses `body` as a form with the boundary from `content_type`.
pub async fn parse(content_type: &str, body: Bytes) -> Result<Form, String> {
    let boundary = multer::parse_boundary(content_type).map_err(|e| e.to_string())?;
    let stream = futures::stream::once(async move { Ok::<_, std::convert::Infallible>(body) });
    let mut multipart = multer::Multipart::new(stream, boundary);
    let mut form = Form::default();
    while let Some(field) = multipart.next_field().await.map_err(|e| e.to_string())? {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(ToString::to_string);
        let data = field.bytes().await.map_err(|e| e.to_string())?;
        form.fields.push(FormField {
            name,
            file_name,
            content_type,
            data,
        });
    }
    Ok(form)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn parses_text_and_file_fields() {
        let body = "--XX\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsd\r\n\
                    --XX\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\
                    Content-Type: image/png\r\n\r\n\x01\x02\r\n--XX--\r\n";
        let form = parse("multipart/form-data; boundary=XX", Bytes::from(body))
            .await
            .expect("form");
        assert_eq!(form.text("model"), Some("sd"));
        let image = form.field("image").expect("image");
        assert_eq!(image.file_name.as_deref(), Some("a.png"));
        assert_eq!(image.content_type.as_deref(), Some("image/png"));
        assert_eq!(&image.data[..], b"\x01\x02");
        assert!(is_multipart("Multipart/Form-Data; boundary=XX"));
    }

    #[tokio::test]
    async fn rejects_garbage() {
        assert!(parse("multipart/form-data", Bytes::from_static(b"x"))
            .await
            .is_err());
        assert!(parse(
            "multipart/form-data; boundary=XX",
            Bytes::from_static(b"nope")
        )
        .await
        .is_err());
    }
}
